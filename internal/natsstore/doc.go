// Package natsstore keeps the sandboxes' event logs and states in NATS
// JetStream, so several coordinator processes can share them. It implements
// sandbox.Store and the retention methods (Prune, Compact, Drop, Stats,
// Check) like boltstore. The leases of those processes, their registry
// and the calls they forward to each other are not the store's: package
// natscluster keeps them on the store's connection (Store.Conn,
// Store.Bucket), and the two meet at one seam, the fences (Store.Fences;
// see "Fencing" below); its requests fail as the store's do when NATS
// does not answer (see below). natsstore imports neither natscluster, the
// cluster contract nor the coordinator: a fenced append answers
// sandbox.ErrFenced, which the coordinator matches.
//
// # Layout
//
//	stream SPARKLES (file storage), subjects sparkles.events.*, sparkles.events-fence.*
//	  sparkles.events.<sandbox id>   one subject per sandbox: its log. Each
//	                                 message is the event's envelope with a
//	                                 null id; the id is the stream sequence
//	  sparkles.events-fence.<id>     the fences of the nodes that took the
//	                                 sandbox's lease, one message each (the
//	                                 node and its registration); the last
//	                                 one's sequence is the holder's epoch
//	bucket sparkles (key-value, file storage, history 1)
//	  state.<id>                  sandbox.State JSON, the sandbox resource
//	                              first: what a snapshot shows, with the
//	                              watermarks of the log, and "owner": the
//	                              epoch of the node that holds the log
//	  config.<id>                 the coordinator's private settings, opaque
//	  turn.<id>.<turn id>         sandbox.Turn JSON
//	  appr.<id>.<approval id>     sandbox.Approval JSON
//	bucket sparkles-webhooks (key-value, as the bucket sparkles; webhooks.go)
//	  ep.<endpoint id>            a webhook endpoint's record, JSON opaque
//	                              to the store, its signing secret included
//	  cur.<endpoint id>.<id>      decimal: the endpoint is done with that
//	                              sandbox's log through this event; never
//	                              moves back. A byte of an id outside
//	                              [A-Za-z0-9_-] is written =XX (hex)
//
// The state also counts the bytes of the log's retained events and of its
// current turn (sandbox.State.LogBytes, TurnBytes), moved by the same
// revision-checked updates: an append and a fold add what they fold, a
// prune subtracts what it purges, which it reads first (a purge reports
// how many messages it removed, not their bytes), and a compaction what
// it deleted. Check compares the count with the log.
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
// An append publishes its events, awaits their acknowledgement (JetStream
// acknowledges once the message is written; with the server's
// sync_interval set to always, once it is synced), folds them into the
// state with sandbox.State.Apply, stores the turns and approvals they
// changed, and then updates state.<id> with the revision it read. Every
// key-value write of an append expects state.<id> to be at that revision,
// so a writer whose read is out of date changes nothing. Only then does
// this process show the events to its readers and wake its waiters.
// Appends to one sandbox from one process are serialized. If the update
// finds a newer revision (another process wrote), the append reads the
// state again and folds the stream as it is on top of it.
//
// How the events go on the wire depends on the stream (publish.go). On a
// single server they are pipelined: all sent at once, each checked by the
// server as it stores it, so an append costs one round trip however many
// events it carries. On a replicated stream a leader refuses a second
// pipelined message with an expectation on a subject whose first is still
// being replicated, so an append goes as one atomic batch (all or nothing,
// consecutive sequences). On a single server an atomic batch is staged in
// a file store of its own and costs several times a pipelined append (4
// events an append, sync always, 2 cores: 458 against 1,122 events/s with
// one writer, 529 against 4,031 with 16), so it is kept for replicated
// streams, where it costs about what pipelining does (3 servers, 3
// replicas: 2,144 against 1,348 with one writer, 5,132 against 7,531 with
// 16).
//
// A publish that gets no answer (a server that went away, a cluster
// electing a leader) may have been stored. The append reads the log back:
// what it finds of its own events after the last message it saw is taken
// as stored and the rest sent again, within Options.Timeout. Nothing else
// can be there: a process that holds the log's fence is its only writer,
// and any other publish expects what it saw last.
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
// # Fencing
//
// A coordinator node writes a sandbox only while it holds the sandbox's
// lease; a node that was paused or cut off past the lease TTL must not
// write after another node took the sandbox over (fence.go). Taking a
// lease puts up a fence on the sandbox's fence subject; its sequence is
// the node's epoch, and state.<id> is rewritten with it as the owner.
//
// The leases are natscluster's, the fences the store's, and Fences is
// the seam between them. A process that joins a cluster calls
// Store.Fences once with a hook that reports whether its leases hold now,
// and gets the *Fences it puts up with: Hold when it takes a sandbox's
// lease (before it writes the sandbox; it returns the epoch), Lose when it
// lets go of one, LoseAll when its leases lapse or it leaves. The store
// asks the hook before every append to a sandbox it holds, and refuses
// the append without sending anything once the leases do not hold; a
// store whose Fences nobody took writes unfenced.
// Every publish of an append expects the last sequence of the log and the
// fence subject together (one wildcard subject covers both) to be what
// the writer last saw, so a fence put up since refuses it; pipelined
// events after the first expect the fence subject unchanged, atomic ones
// stand or fall with the first. The takeover's state rewrite refuses the
// earlier holder's key-value writes. An append refused so fails with a
// *FencedError (sandbox.ErrFenced) and writes nothing; one made after
// this process learned that its leases lapsed is refused before it sends
// anything. A node of a cluster that holds no lease of a sandbox that has
// a fence may not write it at all; a store without a cluster writes
// unfenced, as before.
//
// Events an earlier holder stored before the fence are part of the log:
// the new holder folds them in when it takes over, before it writes. The
// fence also ends what a refused append would otherwise take back: events
// stored ahead of a fence stay, for the holder to fold.
//
// # Visibility across processes
//
// Every process follows state.* with a key-value watch: Head, Wait,
// Sandbox and the listing serve from memory what the watch delivered, or
// what this process wrote itself, whichever is newer. State reads the
// bucket unless this process holds the latest revision it has seen; a
// cursor beyond the last id this process knows is checked against the
// bucket's leader before Read calls it stale, and the state read there is
// kept, so a stream opened with that cursor right after finds a state as
// new as it (the server's stream asks Read for such a cursor).
//
// Reads are direct gets, which any replica of a replicated stream may
// answer, and one that has not caught up yet lacks what was written a
// moment ago. A key-value read that says "not found" is asked again of the
// stream's leader, in every bucket the store opens, its own and the
// cluster's (leaderKV). A read of the log that ends, nothing more pending,
// before the last id the state gives is finished from the log's leader, a
// message at a time (getBatch): the server's streams take a short page for
// the end of the log and would skip what it lacked. A stale value is
// otherwise harmless: every write expects the revision or sequence it
// read, and the leader refuses one that moved.
//
// # When NATS does not answer
//
// The store learns at once that NATS went away (reach.go): from the
// connection, from a probe of the stream and the bucket every second, and
// from a request of its own that got no answer. While NATS is away, a call
// that needs the server fails at once as unavailable instead of after
// Options.Timeout; a read in flight is given up at once, a write in
// flight writeGrace later, so an outage shorter than that costs the write
// nothing. A write given up has an unknown outcome: made again, its events
// are recognised where they landed (publish.go). Health answers from what
// the store knows, without waiting. The cluster side asks the same
// (Store.Unreachable, CutOff, CutOffWrites, Classify), so its claims and
// releases fail as the store's calls do.
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
// sandbox from the one process that holds its lease, and fencing keeps it
// so. Two nodes' Prune or Compact of the same events at once remove each
// once; a delete that finds the event gone counts as done. Drop should
// run where the sandbox's writes run. Prune records the new pruned_through
// before it purges: a reader in another process checks its cursor against
// the watermark as its watch has delivered it, so until the watch
// delivers the new one it may serve, to a cursor inside the range just
// pruned (or to 0), the events after that range instead of cursor_pruned.
// The retention loop of each node counts a log through such reads, so it
// prunes with PruneFrom: on the condition, checked on the revision the
// watermarks move from, that the log is pruned no further than where its
// count began. A count that another node's prune made too high is then
// refused instead of cutting too far, and two nodes' loops together remove
// no event that their limit keeps.
//
// The webhook methods (webhooks.go) are safe from any number of processes
// at once: a cursor's write expects the revision it read and keeps the
// larger value, and a cursor set as its endpoint is deleted is removed.
package natsstore
