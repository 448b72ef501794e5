package snapshot_test

import (
	"io"
	"syscall"
	"testing"
	"time"

	"github.com/sparkles-dev/sparkles/internal/benchtree"
	"github.com/sparkles-dev/sparkles/internal/snapshot"
)

// benchWorkspace writes the workspace of the targets (benchtree.Full)
// and takes the first snapshot.
func benchWorkspace(b *testing.B) *workspace {
	b.Helper()
	w := mustOpen(b, snapshot.Options{})
	if err := benchtree.Write(w.work, benchtree.Full); err != nil {
		b.Fatal(err)
	}
	w.take()
	return w
}

// edit changes benchtree.Changed files in their middle, as an agent's edit.
func edit(b *testing.B, w *workspace, round int) {
	b.Helper()
	if _, err := benchtree.Edit(w.work, benchtree.Full, round, benchtree.Changed); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkTake is a turn boundary: the snapshot after a turn that
// changed 10 files of the workspace. Target: 100 ms.
func BenchmarkTake(b *testing.B) {
	w := benchWorkspace(b)
	w.take() // the racy files of the first snapshot settle
	round := 0
	var cpu time.Duration
	for b.Loop() {
		b.StopTimer()
		round++
		edit(b, w, round)
		c0 := cpuTime()
		b.StartTimer()
		w.take()
		b.StopTimer()
		cpu += cpuTime() - c0
		b.StartTimer()
	}
	reportCPU(b, cpu)
}

// cpuTime is the process's CPU time: on a shared machine the wall time
// of an operation says as much about the neighbours as about it.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func reportCPU(b *testing.B, cpu time.Duration) {
	b.ReportMetric(float64(cpu.Microseconds())/1000/float64(b.N), "cpu-ms/op")
}

// BenchmarkDiff is that turn's unified diff. Target: 50 ms.
func BenchmarkDiff(b *testing.B) {
	w := benchWorkspace(b)
	from := w.take()
	edit(b, w, 1)
	to := w.take()
	c0 := cpuTime()
	for b.Loop() {
		if err := w.store.Diff(ctx, from, to, io.Discard); err != nil {
			b.Fatal(err)
		}
	}
	reportCPU(b, cpuTime()-c0)
}

// BenchmarkChanges is the turn.completed summary of that turn.
func BenchmarkChanges(b *testing.B) {
	w := benchWorkspace(b)
	from := w.take()
	edit(b, w, 1)
	to := w.take()
	for b.Loop() {
		if _, err := w.store.Changes(ctx, from, to); err != nil {
			b.Fatal(err)
		}
	}
}
