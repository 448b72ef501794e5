// Package natsstore keeps the sandboxes' event logs and states in NATS
// JetStream, so several coordinator processes can share them. It implements
// coordinator.Store and the retention methods (Prune, Compact, Drop, Stats,
// Check) like boltstore, and is the only package that speaks to JetStream.
//
// # Layout
//
//	stream SPARKLES (file storage), subjects sparkles.events.*
//	  sparkles.events.<sandbox id>   one subject per sandbox: its log. Each
//	                                 message is the event's envelope with a
//	                                 null id; the id is the stream sequence
//	bucket sparkles (key-value, file storage, history 1)
//	  state.<id>                  sandbox.State JSON, the sandbox resource
//	                              first: what a snapshot shows, with the
//	                              watermarks of the log
//	  config.<id>                 the coordinator's private settings, opaque
//	  turn.<id>.<turn id>         sandbox.Turn JSON
//	  appr.<id>.<approval id>     sandbox.Approval JSON
//
// One key holds the resource and the state together, so a single
// revision-checked update moves the snapshot, its last_event_id and the
// listing's view of the sandbox at once; there is no separate record of the
// resource to drift from it.
//
// # Event ids
//
// The public event id is the stream sequence, assigned by JetStream when it
// stores the message. It is strictly increasing within a sandbox (one
// subject of one stream) and never reused, not after purges, deletes or a
// restart, but it is not dense: the sandboxes interleave in one sequence.
// Readers splice the sequence into the stored envelope, once per read.
//
// # Writes
//
// An append publishes its events without waiting between them, awaits every
// acknowledgement (JetStream acknowledges once the message is written; with
// the server's sync_interval set to always, once it is synced), folds them
// into the state with sandbox.State.Apply, stores the turns and approvals
// they changed, and then updates state.<id> with the revision it read. Only
// then does this process show the events to its readers and wake its
// waiters. Appends to one sandbox from one process are serialized. If the
// update finds a newer revision (another process wrote), the append reads
// the state again and folds the stream as it is on top of it.
//
// A process that dies between the acknowledgements and the state update
// leaves events in the stream beyond last_event_id. No reader sees them,
// because reads stop at last_event_id; whoever next loads that state to
// write (Open does it for every sandbox) folds them in first. A process
// that still holds the state from before does not reload it for every
// append: instead the first event of each append expects the subject's
// last sequence to be the one this process last saw there, so JetStream
// refuses it if anything was published since, and the append folds the
// newcomers in and starts again. A write that loses such a race waits a
// short random time before it retries.
//
// # Visibility across processes
//
// Every process follows state.* with a key-value watch: Head, Wait,
// Sandbox and the listing serve from memory what the watch delivered, or
// what this process wrote itself, whichever is newer. State reads the
// bucket unless this process holds the latest revision it has seen; a
// cursor beyond the last id this process knows is checked against the
// bucket before it is called stale.
//
// # Several processes
//
// Safe from any number of processes at once: every read (Read, Head, Wait,
// State, Sandbox, Sandboxes, Config, Turn, Approval), Create (an existing
// id is a conflict), Stats and Check. Append, Prune and Compact keep the
// state consistent with the stream from any number of processes (every
// event is folded once, in stream order), but appends to the same sandbox
// from two processes at once may fold a caller's mutate after the other
// process's events rather than before its own; the coordinator writes each
// sandbox from the one process that owns it. Drop should run where the
// sandbox's writes run. Prune records the new pruned_through before it
// purges: a reader in another process checks its cursor against the
// watermark as its watch has delivered it, so in the moment between the
// two it may serve, to a cursor inside the range just pruned, the events
// after that range instead of cursor_pruned.
package natsstore
