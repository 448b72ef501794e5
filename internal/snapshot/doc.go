// Package snapshot records what a turn changed in a sandbox's workspace:
// a snapshot of the work tree at each turn boundary (Take), the files
// changed between two snapshots (Changes), their unified diff (Diff), and
// the workspace put back as a snapshot had it (Restore).
//
// # The store
//
// Each sandbox has its own bare git repository, written with go-git (pure
// Go: no git binary, no hook, no filter, no config of the user's is ever
// read or run), in a directory the caller gives outside the workspace
// (<data-dir>/sandboxes/<id>/snapshots): the agent never sees it. A
// snapshot is a commit whose tree is the work tree; its ID is the commit's
// hash, and refs/heads/snapshots names the newest, each commit the parent
// of the next, so `git log` in the store shows the chain. Like git, the
// store keeps each distinct blob and tree once: a snapshot after a turn
// that changed 10 files adds 10 blobs, the trees above them and a commit.
// Nothing is ever pruned yet; the store lives and goes with the sandbox.
//
// Recorded: regular files (content and the executable bit, as git keeps
// modes) and symbolic links (as links: the target is the content).
// Not recorded: any entry named `.git`, at any depth (the workspace's own
// repository and nested ones are the user's: never read, never written,
// and byte-identical after a Restore); empty directories (as git); FIFOs,
// sockets and devices.
//
// # The walk is hostile-proof
//
// An agent may change the tree while it is snapshotted. The walk opens
// every directory and file relative to its parent's descriptor with
// O_NOFOLLOW (a directory swapped for a link to /etc is not entered),
// opens files with O_NONBLOCK (a FIFO cannot stall it) and checks the
// open file is regular; a file that changes while it is read is read
// again, then skipped until the next snapshot. Restore writes through an
// os.Root of the workspace, each file as a new file in its directory
// renamed over the old path, so a link an agent planted is replaced and
// never written through; a link or file standing where a directory
// belongs is removed first. Restored files and the directories made for
// them get Options.Owner (the agent's uid when the server is root).
//
// # Bounds
//
// A file larger than Options.MaxFileSize (default 100 MiB) is recorded by
// size and blob hash only, in the commit's message (JSON), not stored:
// Changes counts its changes by that hash, Diff names it with its sizes,
// and Restore leaves it as it is (it cannot bring back content it never
// kept), removing it only when it appeared after the snapshot. A file the
// server may not read is recorded the same way by size. Changes lists at
// most MaxListed (1,000) files, sorted by path; its counts cover all.
//
// # Figures
//
// `go test -run '^$' -bench . -benchtime 30x ./internal/snapshot/` on the
// 2-core CI VM, 2026-12-05, a workspace of 10,000 distinct text files,
// 200 MiB, in 100 directories, 10 files edited per turn, with other
// builds running (load average 5 to 7), so wall times vary with the
// neighbours; cpu-ms/op is the process's CPU time per operation:
//
//	BenchmarkTake     86–121 ms/op, 73–81 cpu-ms/op   target 100 ms
//	BenchmarkDiff     13–20 ms/op, 13 cpu-ms/op       target 50 ms
//	BenchmarkChanges  7–13 ms/op
//
// A turn boundary cannot skip looking at every file: the stat cache
// (below) makes that one fstatat per file, and those 10,000 system calls
// are about 30 ms of the CPU time on this VM; hashing and compressing the
// changed files, the ~20 new trees and the stat cache take the rest. The
// first snapshot of a workspace hashes and compresses all of it (seconds
// for 200 MiB), once. What earned its place, each with its figure:
//
//   - The stat cache (statcache.go): a file whose mtime, ctime, inode,
//     size and mode are those it had when last hashed is not read again.
//     Without it every turn boundary would read the 200 MiB. Files hashed
//     within racyWindow of their mtime are hashed again next time, as git
//     does for its racily clean index entries. Its own record format: gob
//     cost 24 ms a snapshot for 10,000 entries.
//   - Trees and commits kept in memory (objects.go): go-git opens a loose
//     object's file before it consults its cache, through a chroot that
//     lstats each component; that made Changes 40 ms and a turn boundary
//     20 ms slower.
//
// Where the target is missed, the next step is to stat the directories of
// the walk in parallel; on a loaded 2-core machine it buys little.
package snapshot
