// Package boltstore keeps the sandboxes' event logs and states in one bbolt
// file. It implements sandbox.Store, plus the retention methods (Prune,
// Compact, Stats, Check) the retention loop uses. It is the only package that
// imports bbolt.
//
// # Layout
//
//	wal/                            top-level bucket: the write-ahead log
//	  8-byte big-endian WAL key -> entries of one commit, one per request (see Writes)
//	sandboxes/                      top-level bucket
//	  <sandbox id>/                 one nested bucket per sandbox; ids are
//	                                prefixed ULIDs, so key order is creation order
//	    meta    sandbox.Sandbox JSON: the resource with its watermarks, small
//	            enough to list many sandboxes without reading their state
//	    state   sandbox.State JSON: what a snapshot shows, consistent with the log;
//	            for a large state, a version byte and its head (see below)
//	    stateitems/ a large state's messages, tools and approvals: list letter
//	                and 4-byte big-endian index -> the item's JSON
//	    config  the coordinator's private settings of the sandbox, opaque bytes
//	    walmark 8-byte big-endian WAL key: the buckets hold every change of
//	            this sandbox that the WAL holds up to this key
//	    compacted 8-byte big-endian id: retention's compaction mark, every
//	            turn completed by it is compacted (SetCompactionMarks), so
//	            the first pass after a start reads each log from there
//	    events/     8-byte big-endian id -> record: 1 byte type length, the type,
//	                then the envelope JSON as served
//	    turns/      turn id -> sandbox.Turn JSON
//	    approvals/  approval id -> sandbox.Approval JSON
//	unsettled/                      top-level bucket: sandbox id -> empty, for each
//	                                sandbox whose meta is not sandbox.Settled
//	webhooks/                       top-level bucket (see Webhooks)
//	  <endpoint id>/                one nested bucket per webhook endpoint
//	    endpoint  the endpoint's record, JSON opaque to the store
//	    cursors/  sandbox id -> 8-byte big-endian id: the endpoint is done
//	              with that sandbox's log through this event
//
// Event ids are per sandbox, dense and strictly increasing, and never reused:
// not after pruning, not after a restart. The next id is the last one plus
// one; the last id is kept in memory and, on disk, in meta, state and the
// events bucket's sequence, which always agree for what the buckets hold.
// The events and WAL buckets are filled to 100% because they are
// append-only.
//
// Each state counts the bytes its log holds, its records' envelopes as
// served, and those of its current turn (sandbox.State.LogBytes and
// TurnBytes), which retention and the coordinator bound: an append adds
// its records' in its transaction, a prune or compaction subtracts the
// values it deletes, a WAL replay counts the records it applies, and Check
// compares the count with the events bucket. A state written before the
// count existed is counted from its events bucket when it is loaded.
//
// A state of up to 64 KiB is one value. A larger one (a running turn of
// thousands of tool calls holds every one of them) is kept as items, and a
// write puts only the items that changed. Written whole at every
// materialization, a growing state needed a longer run of consecutive pages
// each time than its last write had freed (bbolt keeps a value in one run
// of pages), so the file grew by the state at every write: 100,000 events
// in turns of 20,000 tool calls left 132-152 MiB for 59 MiB of events and
// 8 MiB of state, and a refill after pruning half grew it by 31-33 MiB;
// with items, 81 MiB and no growth (sparkles bench, size). One turn of
// 100,000 tool calls: 606 MiB before, 115 MiB after, for 57 MiB of events
// and 41 MiB of state.
//
// # Webhooks
//
// The webhook deliveries (internal/webhook) keep their endpoints and
// cursors here, through the methods of webhooks.go: a delivery is one more
// reader of a log, and its cursor must outlive a restart as the log does.
// An endpoint's record is opaque bytes, like a sandbox's config, so the
// store knows nothing of the delivery's types; it holds the signing
// secret, which no answer carries. A cursor moves after every delivery a
// receiver took, so its writes go through the committer like any other
// and share the commits of the appends beside them rather than adding a
// sync each. A cursor never moves back: a write of a smaller value (a late
// delivery from a node that lost the sandbox) leaves the larger one. A
// cursor is not set for an endpoint deleted since, so a
// delivery racing a delete does not bring the endpoint back; deleting an
// endpoint removes its cursors with it. The cursors of a dropped sandbox
// stay until their endpoint goes: a few bytes each.
//
// # Writes
//
// Group commit. Every write (append, create, prune, compact, drop) goes to
// one committer goroutine, which takes whatever is queued when it is free
// (up to MaxBatch requests) as one batch and applies it, in queue order, in
// one bbolt transaction and one commit (bbolt syncs twice per commit). It
// does not wait to gather more: what arrives while a batch commits makes
// the next one, so batches grow with the load by themselves. A request
// that fails on its own (an unknown sandbox, a mutate error) is left out of
// the transaction without touching it; a storage error fails the whole
// batch. Prunes and compactions are batched like any write, so under load
// they share the commit of the appends queued beside them. This is what
// lets writers that each wait for their append share a sync: through the
// server, 256 writers reached 37,900-39,700 events/s where one writer, a
// commit per event, got 1,700-2,000 (sparkles bench, append, 2026-12-01,
// three runs at load 0.7-1.9 on two cores); at the store a commit carries
// about 125 appends at 256 writers.
//
// The WAL. Appends do not touch the sandboxes' buckets. A commit of appends
// writes one WAL entry per request: the sandbox id, the records with their
// ids, and the state a mutate left when one ran (which a replay cannot
// derive from the records): its head, and of its lists (messages, tools,
// approvals) only those the mutate changed, which the coordinator's never
// do. A status change on a sandbox in a long turn wrote the whole state as
// one value: 41 MiB at the clean stop after 100,000 tool calls, whose
// pages stayed free at the end of the file; its head is a few hundred
// bytes. A commit's entries go under a few WAL keys as
// values of up to 8 KiB, so a commit of 256 one-event appends to 256
// sandboxes is a dozen Puts into the WAL's last pages, where writing each
// sandbox's own buckets rewrites several pages of each. With every commit
// writing the buckets instead, 256 writers got 5,900-7,600 events/s
// against 38,400-49,400 (3.2 page writes per event against 0.28), and the
// product's load (1,000 sandboxes at 20 events/s each) reached 7,500 of
// its 20,000 events/s, append wait p99 176-210 ms, against 19,600 and
// 20-23 ms (go test -bench Append ./boltstore, alternating runs). The
// 8 KiB bound keeps a commit from writing the previous commit's value
// again, since bbolt rewrites the leaf a Put lands in (BENCHMARKS.md).
// Scan reads records without copying them, so that retention's walks over
// long logs leave no garbage behind.
//
// # Materialization
//
// The committer moves what the WAL holds into the sandboxes' buckets (the
// records under their ids, meta, state, turns, approvals, the events
// bucket's sequence and the WAL mark) a chunk at a time: the sandboxes
// whose WAL entries are oldest, in a transaction of their own, which then
// deletes the WAL entries that no sandbox needs any more (collected first,
// then deleted). After each batch that leaves the WAL over its limits
// (20,000 unmaterialized records or 8 MiB, the memory those records may
// hold), it materializes chunk after chunk until the WAL is back under
// them; the appends queued meanwhile wait (backpressure). Stats, Check and
// Close materialize the whole WAL first, and a prune or a compaction
// materializes the sandbox it concerns inside its own transaction. A chunk
// is bounded (4,096 records, 2 MiB or 32 sandboxes, at least one sandbox)
// because it rewrites a few pages of every sandbox it touches: under the
// product's load, with every sandbox in the WAL, chunks over all of them
// gave an append wait p99 of 51-62 ms at the store against 20-23 ms with
// the bound, and 14-15 ms with no materialization at all in the run (go
// test -bench Append/paced ./boltstore, three alternating runs each).
// Through the server (sparkles bench, latency, server in a child process)
// chunks of 8 sandboxes could not keep up with that load (15,000-17,800 of
// its 20,000 events/s) and 16 gave what 32 does; limits four times larger
// halved the chunks' CPU and lowered the p50 (8.0-19.4 against 13.9-24.6
// ms) but not the p99 (80.7-110 against 87.0-111 ms, 30 s runs), for four
// times the memory. With both, limits four times larger and chunks of 8
// sandboxes, the p50 fell (10.1-12.3 against 21.8-31.2 ms, 30 s runs) more
// than the p99 (82.8-90.2 against 100.7-126.9 ms): the cost is per sandbox
// written, whatever the chunk, and a chunk committed without its syncs
// (measured only) gained nothing, since the next commit's sync writes its
// pages.
//
// Until it is materialized, what a sandbox has only in the WAL is kept in
// memory (its walTail): the records, which are the newest of its log, and
// the turns and approvals its events changed. Read serves those records
// from memory and older ids from the events bucket, stitching the two at
// the first id the bucket lacks; a cursor at the head reads nothing. Turn
// and Approval look in memory before the file.
//
// No other copy of the records is kept in memory. An earlier version kept
// each sandbox's newest records (up to 1,024 and 8 MiB) in a ring for the
// streams at its tail, at most 64 MiB for all sandboxes together: without
// that bound the server that wrote coldstart's data dir (2,000 sandboxes
// of 1,000 events) held 1,294 MiB of Go heap after it, with it 95 MiB
// (sparkles bench, coldstart). The ring sped up only the reads of records
// already moved out of the WAL, as a stream that reconnects behind the
// tail makes: the 100 records behind the head of a materialized log of
// 2,000 took 6.4-11.5 µs from it and 74-236 µs from the file
// (BenchmarkReadRecent, removed with the ring, 2026-12-05, load average
// 9). The reads of the streams at the tail were not among them: the
// server's shared tails read each commit's records while the WAL still
// holds them. Under the product's load (sparkles bench, latency, server in
// a child process, two alternating runs each at load average 10-13) the
// server's CPU per event was 41.9-59.7 µs with the ring and 42.8-55.7 µs
// with a ring that held nothing, and the p99 moved no more than the runs'
// spread. So the ring went, and the up to 64 MiB of heap it held with it.
//
// Nothing else is in the committer. Earlier versions pipelined batches of
// appends (one committing while the next was prepared on top of its
// states, with creates and drops as barriers that drained the pipeline),
// waited up to 2 ms after a large commit to gather a larger batch, held
// prunes up to 10 ms for appends to ride with, carried chunks in commits
// of appends, and materialized an idle WAL after 250 ms. Against this
// committer, on the same machine, none made a difference beyond the runs'
// spread: 256 writers at the store 43,200 events/s with all of them
// against 42,500 without (medians of five alternating runs, 37,000-49,400
// in all; gathering raised a commit from 125 appends to 175, not the
// rate); the product's load at the store an append wait p50 of 3.4-5.4 ms
// and p99 21-23 ms with them against 1.9-2.7 and 20-23 ms without; through
// the server, 256 writers 37,300-42,500 against 37,900-39,700 events/s and
// the product's load an append-to-SSE p99 of 141-155 ms against 128-147 ms
// (three alternating runs each). Neither benchmark prunes; a prune queued
// beside appends shares their commit without waiting for it.
//
// On two cores no committer tried meets the product's 50 ms through the
// server, and the storage's work is not what holds the p99: it moves the
// p50. Three alternating 10 s runs of each (sparkles bench, latency,
// server in a child process, 2026-12-01 at bd53358): p50 36.7-41.4 ms and
// p99 99.6-102.8 ms as the store is; with no materialization in the run (a
// scratch build that let the WAL grow) p50 22.0-27.0 and p99 99.6-123.7;
// with neither materialization nor syncs p50 6.2-12.2 and p99 80.7-107,
// the machine 89-90 % busy against 80-82 %. A scheduler trace of the child
// shows where the tail goes: each goroutine a commit wakes (its appenders,
// its streams) waits for a processor 11-29 ms at its p50, about 700 are
// runnable on average, and the committer waits for one after its syncs
// (p90 24 ms, 39 % of its time). Over a 10 s run the committer is idle
// for 0.4 s: commits take 5.8 s and chunks 4.3 s, of which its own CPU is
// a third. Earlier runs the same day on a faster host put the p99 with no
// materialization at 41.9-91.2 against 71.3-127.9 ms, lower in each of
// nine alternating pairs. A chunk holds the appends behind it for about 15
// ms, and the batch after it is large. Carrying a few sandboxes'
// materialization in each commit of appends instead of chunks of their own
// made the commits slower and the p99 worse (92, 54 and 83 ms against 59,
// 61 and 64 ms, alternating runs): a sandbox's materialization costs about
// the same whatever its records, so more and smaller ones cost more. A
// writer of its own for the materialization, which bbolt, one writer per
// file, gives only to a WAL in a file of its own, would lower the p50; the
// p99 needs less CPU per event (see BENCHMARKS.md, latency). The machine
// leaves room for it: the same load against a bare SSE writer, with no
// store at all, gave a p99 of 3.6-6.2 ms at 34-39 µs of CPU per event
// (sparkles bench, floor, 2026-12-02), about half what the server spends.
//
// # Visibility
//
// Readers see a write only once it is published: after the transaction has
// committed and synced, the committer updates the in-memory sandbox (resource,
// state, WAL tail, Wait channel) under the store's lock, held alone;
// readers (Head, Wait, what Read finds in memory, the published
// resources) share it. The waiters' channels are closed once the lock is
// let go, so the streams a commit wakes do not queue on it: under the
// product's load a scheduler trace showed them 160 s in 2 s runnable
// behind Wait's unlock, when Wait took the lock alone. Reads from
// the file are bounded by the published last id, because bbolt lets a new
// read transaction see a meta page whose sync has not finished yet, and a
// crash in that window would give the same ids to other events.
// Materialization moves only records already published, so what a reader
// finds in the buckets is durable either way.
//
// # Crash replay
//
// Open replays the WAL before serving: every entry whose key is above its
// sandbox's WAL mark is applied to the buckets as the committer applied it
// (the stored post-mutate state, then the fold of each record, whose ids
// must continue the sandbox's last id), the sequences, meta, state and WAL
// marks are written, and the WAL is emptied, in one transaction. Entries of
// sandboxes dropped since are skipped; a sandbox created again under the same
// id starts with a WAL mark at the WAL's sequence, so it never inherits them.
// A crash between a commit and its materialization therefore loses nothing
// and reuses no id. A file a server closed has an empty WAL and its
// buckets: Open finds that in a read transaction and commits nothing (a
// commit of nothing still writes a meta page and syncs the file twice,
// 1-2 ms of every start).
//
// What a start reads per sandbox past Open: in the first retention pass,
// its meta, its compaction mark, the head of its state (LogBytes) and its
// oldest event, for its age. Recovery, before the server answers, reads
// the unsettled bucket and the state of the sandboxes it lists (a current
// or queued turn, an agent that may have been running), no other: listing
// every meta, each in a bucket of its own scattered over the file, cost
// about 150 µs a sandbox with the page cache dropped, 0.3 s of a start on
// 2,000 sandboxes (BENCHMARKS.md, coldstart). The bucket changes in the
// transaction that writes a meta (a create, a materialization, a prune or
// a compaction, a replay) or drops a sandbox, and only when the sandbox
// goes in or out: it is read first, so a meta written without such a change
// dirties none of its pages. It follows the metas, not the WAL; what only
// the WAL holds is in memory, which Unsettled consults. A file written
// before the bucket existed gets it at its open, from every meta, once;
// Check compares it with the metas. A file that a version without the
// bucket wrote after this one (a downgrade, then an upgrade again) keeps
// a bucket that may miss a sandbox left open meanwhile, whose turn a
// start then does not settle: `sparkles db check` names it. Nothing
// rebuilds a bucket that exists.
//
// # The file under the store
//
// bbolt does not fail on a damaged file, it ends the process: it faults
// reading the pages of a file cut short, asserts on a page that names
// another, and its free-page scan at open panics on a goroutine of its own
// for a key out of order or a page referenced twice. A damaged file is a
// DamagedError instead, which serve makes one line of.
//
// A commit writes bbolt's free-page list while it holds at most 4,096 pages
// (32 KiB) and leaves it out while it is longer (syncFreelistFor); Close
// writes it whatever its length. bbolt's open of a file a server closed,
// or of one a crash left with a short list, therefore reads its meta pages
// and that list, nothing else, and Open
// locks the file and checks the same before bbolt maps it (verify.go): the
// meta page bbolt will use, that the file holds every page that meta
// counts, the list, and the trees of the top-level buckets (the WAL and the
// list of sandboxes, a few pages per sandbox), with the checks of bbolt's
// scan plus the bounds bbolt takes for granted, in plain reads. The rest of
// the file is read as it is used. Over 2,000 sandboxes of 1,000 events (a
// 1.3 GB file) a start to the first /healthz answer took 3.6-4.6 s with
// the page cache dropped and 1.8-2.5 s warm, with every page read twice
// (the check, then bbolt's scan) and the whole file resident (RSS 1.35
// GB); now 0.29-0.70 s and 0.11-0.16 s, RSS 30 MiB of which 8 MiB is the
// file's (sparkles bench, coldstart). A file without the list is checked
// whole, every page in use, because bbolt then rebuilds the list at open
// by scanning every page on that goroutine of its own: 3.1-4.5 s there,
// and 9.7 s with 1.36 GB of RSS measured from outside after a SIGKILL,
// when no commit wrote the list.
//
// Writing the list costs each commit its whole length (bbolt sorts and
// writes every free page id), and it is long only after a large prune,
// until appends take its pages again: 256 writers, one event per append,
// on a file with 34,800 free pages (136 MiB, half of 256 sandboxes of
// 1,600 events pruned) took 16-27 µs of CPU per event with no list written
// and 24-34 with the list at every commit (36,900 against 19,500 events/s
// in the quietest pair, at load 2-3); with the list written while short,
// 21 µs. On a new file, with few free pages, the three took 28-34 µs
// (go test -bench 'AppendFreePages|Append/writers=256' ./boltstore, 2026-12-05,
// alternating runs on two cores shared with other work at load 2-25, so
// the rates spread 5,900-49,100 events/s).
// So the list is written while it is short, which is how appends leave
// it, and a crash in the window a large prune opens costs the whole check
// of before; the next commit after the list is back under its bound
// writes it again.
//
// Every use of the file by bbolt runs guarded (guard.go), with faults made
// panics and panics recovered: a damaged page is a DamagedError for the
// read or the write that meets it. A write transaction recovers a panic
// itself and rolls back in memory, because bbolt's rollback of a panic
// rebuilds the free-page list by scanning every page, which on a damaged
// file panics again, fatally. A read refuses event keys out of order, so
// a damaged log does not serve ids out of order, and a value longer than
// the whole file before it copies it (a damaged leaf can claim up to
// 2 GB; the copy would allocate that before it faulted). Once the store meets
// damage while it runs it takes no more writes (the unavailable error,
// which Writable gives /readyz), reads go on where the file can be read,
// and one ERROR line says what to do. What is not found until db check
// reads every page: damage bbolt reads without failing (a key or a child
// page id changed into another valid one); and a branch page made to name
// one of its ancestors, which bbolt would follow until the stack
// overflows, which no recover survives. The offline tools (db check,
// stats, compact) read every page, so they check the whole file first.
//
// While it runs, the store compares the file it has open (device and
// inode, taken when it locked it) with the one at its path every 2 s and
// after a failed commit. Once the path names another file or none (the data
// dir deleted, a copy restored over the file) every write would go into a
// file no one will open again, so every write is refused with the
// unavailable error (HTTP 503), Writable says so for /readyz, reads go on
// from the open file, and one ERROR line names the path under /proc the
// open file can still be copied from. If the same file comes back to the
// path, writes resume.
//
// db compact writes its copy beside the file (sparkles.db.compact-N) and
// holds a shared lock on the file while the copy exists. The copy of a
// compaction that was killed is removed by the server's open, which holds
// the exclusive lock, and by the next db compact, which takes the
// exclusive lock for the moment it removes it.
package boltstore
