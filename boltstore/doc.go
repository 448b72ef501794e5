// Package boltstore keeps the sandboxes' event logs and states in one bbolt
// file. It implements coordinator.Store, plus the retention methods (Prune,
// Compact, Stats, Check) the retention loop uses. It is the only package that
// imports bbolt.
//
// # Layout
//
//	sandboxes/                      top-level bucket
//	  <sandbox id>/                 one nested bucket per sandbox; ids are
//	                                prefixed ULIDs, so key order is creation order
//	    meta    sandbox.Sandbox JSON: the resource with its watermarks, small
//	            enough to list many sandboxes without reading their state
//	    state   sandbox.State JSON: what a snapshot shows, consistent with the log
//	    config  the coordinator's private settings of the sandbox, opaque bytes
//	    events/     8-byte big-endian id -> record: 1 byte type length, the type,
//	                then the envelope JSON as served
//	    turns/      turn id -> sandbox.Turn JSON
//	    approvals/  approval id -> sandbox.Approval JSON
//
// Event ids come from the events bucket's NextSequence, which bbolt keeps in
// the bucket header: they are never reused, not after pruning and not after a
// restart. The events bucket is filled to 100% because it is append-only.
// meta and state are rewritten in the same transaction as the events they
// fold, so the state and its last_event_id always agree on disk.
//
// # Writes
//
// Every write (append, create, prune, compact, drop) goes to one committer
// goroutine, which runs whatever is queued as one bbolt transaction and one
// fsync (group commit). A request that fails on its own (an unknown sandbox, a
// mutate error) is left out of the transaction without touching it; a storage
// error fails the whole batch.
//
// # Visibility
//
// Readers see a write only once it is published: after the transaction has
// committed and synced, the committer updates the in-memory sandbox (resource,
// state, recent records, Wait channel) under one lock. Reads from the file are
// bounded by the published last id, because bbolt lets a new read transaction
// see a meta page whose fsync has not finished yet, and a crash in that window
// would give the same ids to other events.
package boltstore
