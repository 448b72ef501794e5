package bench

import (
	"context"
	"fmt"
	"os"
	"slices"
	"syscall"
	"time"

	"github.com/sparkles-dev/sparkles/internal/benchtree"
	"github.com/sparkles-dev/sparkles/internal/datadir"
	"github.com/sparkles-dev/sparkles/internal/snapshot"
	"github.com/sparkles-dev/sparkles/internal/workspace"
)

// runWorkspace measures what a turn costs the workspace it works in, with
// internal/snapshot and internal/workspace as the coordinator calls them,
// no server around them: a turn boundary (the store opened, the tree
// snapshotted, the snapshot marked, the store closed: the coordinator
// keeps no store open between turns), the turn's change list and its
// diff, each through a store opened for it as the coordinator's are, and
// the tar.gz of the whole tree. The tree is benchtree's, the one the go
// benchmarks of those packages measure; each round edits 10 of its files
// between the turn's start and its end.
func runWorkspace(ctx context.Context, r *runner) error {
	dir, cleanup, err := r.tempDir()
	if err != nil {
		return err
	}
	defer cleanup()
	tree := pick(r, benchtree.Full, benchtree.Spec{Files: 200, Dirs: 10, Bytes: 1 << 20})
	rounds, archives := pick(r, 20, 3), pick(r, 3, 1)
	work, store := datadir.Sandbox(dir).Work(), datadir.Sandbox(dir).Snapshots()
	if err := os.Mkdir(work, 0o755); err != nil {
		return err
	}
	r.logf("writing %d files of %d bytes in %d directories", tree.Files, tree.PerFile(), tree.Dirs)
	if err := benchtree.Write(work, tree); err != nil {
		return err
	}
	b := boundaries{ctx: ctx, dir: store, work: work}
	start := time.Now()
	if _, err := b.mark("first"); err != nil {
		return err
	}
	first := time.Since(start)

	var ends, takes, changes, diffs []time.Duration
	var cpu, diffCPU time.Duration
	var diffBytes int64
	for round := range rounds {
		turn := fmt.Sprintf("turn_%02d", round)
		from, err := b.mark(turn + "/start")
		if err != nil {
			return err
		}
		edited, err := benchtree.Edit(work, tree, round, benchtree.Changed)
		if err != nil {
			return err
		}
		c0 := cpuTime()
		t0 := time.Now()
		to, err := b.mark(turn + "/end")
		if err != nil {
			return err
		}
		ends, takes = append(ends, time.Since(t0)), append(takes, b.took)
		cpu += cpuTime() - c0

		t0 = time.Now()
		ch, err := b.changes(from, to)
		if err != nil {
			return err
		}
		changes = append(changes, time.Since(t0))
		if ch.Modified != len(edited) || ch.Added+ch.Deleted != 0 {
			return fmt.Errorf("round %d edited %d files; the change list has %d modified, %d added, %d deleted",
				round, len(edited), ch.Modified, ch.Added, ch.Deleted)
		}

		c0, t0 = cpuTime(), time.Now()
		n, err := b.diff(turn)
		if err != nil {
			return err
		}
		diffs, diffBytes = append(diffs, time.Since(t0)), n
		diffCPU += cpuTime() - c0
	}

	size := fmt.Sprintf("%d distinct source-like text files, %.0f MiB, in %d directories", tree.Files, mib(tree.Bytes), tree.Dirs)
	cond := fmt.Sprintf("%s, %d files edited in their middle per turn, %d turns; store opened, snapshot taken and marked, store closed, "+
		"as the coordinator does at each turn's start and end; this the end", size, benchtree.Changed, rounds)
	r.add(Figure{Name: "turn boundary, p50", Value: ms(quantile(ends, 0.5)), Unit: "ms", Conditions: cond,
		Target: "<= 100 ms", Met: atLeast(100, ms(quantile(ends, 0.5)))})
	r.add(Figure{Name: "turn boundary, max", Value: ms(quantile(ends, 1)), Unit: "ms", Conditions: cond})
	r.add(Figure{Name: "turn boundary, CPU time", Value: ms(cpu / time.Duration(rounds)), Unit: "ms", Conditions: cond +
		"; user and system time of this process per boundary, which the machine's other load does not add to"})
	r.add(Figure{Name: "turn boundary, of which Take, p50", Value: ms(quantile(takes, 0.5)), Unit: "ms", Conditions: cond})
	r.add(Figure{Name: "first snapshot of the workspace", Value: ms(first), Unit: "ms", Conditions: size + "; every file hashed and stored, once per sandbox"})
	r.add(Figure{Name: "turn's change list, p50", Value: ms(quantile(changes, 0.5)), Unit: "ms",
		Conditions: "the changes of turn.completed for each of those turns, in a store opened for it"})
	dcond := fmt.Sprintf("the unified diff of each of those turns (%.1f KiB) to io.Discard, in a store opened for it and its marks looked up, "+
		"as GET .../turns/{turn_id}/diff does", float64(diffBytes)/1024)
	r.add(Figure{Name: "turn's diff, p50", Value: ms(quantile(diffs, 0.5)), Unit: "ms", Conditions: dcond,
		Target: "<= 50 ms", Met: atLeast(50, ms(quantile(diffs, 0.5)))})
	r.add(Figure{Name: "turn's diff, max", Value: ms(quantile(diffs, 1)), Unit: "ms", Conditions: dcond})
	r.add(Figure{Name: "turn's diff, CPU time", Value: ms(diffCPU / time.Duration(rounds)), Unit: "ms", Conditions: dcond +
		"; user and system time of this process per diff"})

	r.logf("archiving the tree %d times", archives)
	ws, err := workspace.Open(work, workspace.Options{Log: newLogger(r.cfg.Log)})
	if err != nil {
		return err
	}
	defer ws.Close()
	var rates []float64
	var ratio float64
	var archiveCPU time.Duration
	var archived int64
	for range archives {
		if err := ctx.Err(); err != nil {
			return err
		}
		var out countingWriter
		c0, t0 := cpuTime(), time.Now()
		sum, err := ws.Archive(&out, "")
		if err != nil {
			return err
		}
		archiveCPU += cpuTime() - c0
		archived += sum.Bytes
		if sum.Bytes < tree.Bytes-int64(tree.Files) {
			return fmt.Errorf("the archive holds %d bytes of files, want at least the tree's %d", sum.Bytes, tree.Bytes-int64(tree.Files))
		}
		rates = append(rates, mib(sum.Bytes)/time.Since(t0).Seconds())
		ratio = float64(sum.Bytes) / float64(out)
	}
	slices.Sort(rates)
	rate := rates[len(rates)/2]
	acond := fmt.Sprintf("%s after the turns, streamed as tar.gz to io.Discard by workspace.Archive (GET .../archive without HTTP), "+
		"median of %d; MiB of files read per second", size, archives)
	r.add(Figure{Name: "archive of the workspace", Value: rate, Unit: "MiB/s", Conditions: acond,
		Target: ">= 100 MiB/s", Met: atLeast(rate, 100)})
	r.add(Figure{Name: "archive, per second of CPU time", Value: mib(archived) / max(archiveCPU.Seconds(), 1e-9), Unit: "MiB/s",
		Conditions: acond + "; MiB of files per second of this process's user and system time, which the machine's other load does not take"})
	r.add(Figure{Name: "archive compression ratio", Value: ratio, Unit: "x", Conditions: acond})
	return nil
}

// boundaries opens a snapshot store for each call, as the coordinator
// does.
type boundaries struct {
	ctx       context.Context
	dir, work string
	took      time.Duration // Take's share of the last mark
}

// mark takes a snapshot and names it, as the coordinator's markTurn.
func (b *boundaries) mark(name string) (snapshot.ID, error) {
	s, err := snapshot.Open(b.dir, b.work, snapshot.Options{})
	if err != nil {
		return "", err
	}
	defer s.Close()
	t0 := time.Now()
	id, err := s.Take(b.ctx)
	b.took = time.Since(t0)
	if err != nil {
		return "", err
	}
	return id, s.Mark(name, id)
}

func (b *boundaries) changes(from, to snapshot.ID) (snapshot.Changes, error) {
	s, err := snapshot.Open(b.dir, b.work, snapshot.Options{})
	if err != nil {
		return snapshot.Changes{}, err
	}
	defer s.Close()
	return s.Changes(b.ctx, from, to)
}

// diff writes turn's diff to io.Discard, as the coordinator's Diff, and
// answers its size.
func (b *boundaries) diff(turn string) (int64, error) {
	s, err := snapshot.Open(b.dir, b.work, snapshot.Options{})
	if err != nil {
		return 0, err
	}
	defer s.Close()
	from, err := s.Marked(turn + "/start")
	if err != nil {
		return 0, err
	}
	to, err := s.Marked(turn + "/end")
	if err != nil {
		return 0, err
	}
	var n countingWriter
	if err := s.Diff(b.ctx, from, to, &n); err != nil {
		return 0, err
	}
	if n == 0 {
		return 0, fmt.Errorf("the diff of %s, which edited %d files, is empty", turn, benchtree.Changed)
	}
	return int64(n), nil
}

// quantile answers the p quantile of d (1 the largest), sorting d.
func quantile(d []time.Duration, p float64) time.Duration {
	slices.Sort(d)
	return d[min(len(d)-1, int(p*float64(len(d))))]
}

// cpuTime is this process's user and system time: on a shared machine
// the wall time of an operation says as much about the neighbours as
// about it.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// countingWriter discards what it is given and counts it.
type countingWriter int64

func (c *countingWriter) Write(p []byte) (int, error) {
	*c += countingWriter(len(p))
	return len(p), nil
}
