package snapshot_test

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sparkles-dev/sparkles/internal/snapshot"
)

// The target workspace of issue 28: 10,000 files, 200 MiB, 10 changed
// per turn.
const (
	benchFiles   = 10000
	benchDirs    = 100
	benchBytes   = 200 << 20
	benchChanged = 10
)

// benchWorkspace writes the workspace (distinct text files, so the store
// holds 200 MiB of blobs as a real one would), dates it an hour back as a
// workspace that existed before the turn, and takes the first snapshot.
func benchWorkspace(b *testing.B) *workspace {
	b.Helper()
	w := mustOpen(b, snapshot.Options{})
	per := benchBytes / benchFiles
	old := time.Now().Add(-time.Hour)
	var sb strings.Builder
	for i := range benchFiles {
		sb.Reset()
		for line := 0; sb.Len() < per; line++ {
			fmt.Fprintf(&sb, "file %05d line %04d: the quick brown fox jumps over the lazy dog\n", i, line)
		}
		p := w.path(benchPath(i))
		if i < benchDirs {
			os.MkdirAll(filepath.Dir(p), 0o755)
		}
		if err := os.WriteFile(p, []byte(sb.String()[:per]), 0o644); err != nil {
			b.Fatal(err)
		}
		os.Chtimes(p, old, old)
	}
	w.take()
	return w
}

func benchPath(i int) string { return fmt.Sprintf("pkg%02d/sub/file%05d.txt", i%benchDirs, i) }

// edit changes benchChanged files in their middle, as an agent's edit.
func edit(b *testing.B, w *workspace, round int) {
	b.Helper()
	for k := range benchChanged {
		p := w.path(benchPath((round*benchChanged + k*997) % benchFiles))
		data, err := os.ReadFile(p)
		if err != nil {
			b.Fatal(err)
		}
		mid := len(data) / 2
		out := append(append(data[:mid:mid], fmt.Sprintf("edited in round %d\n", round)...), data[mid:]...)
		if err := os.WriteFile(p, out, 0o644); err != nil {
			b.Fatal(err)
		}
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
