//go:build linux

package confine

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// procOf makes a directory that stands for a namespace's /proc holding
// only the processes of cmds: a link per pid to the real entry.
func procOf(tb testing.TB, cmds []*exec.Cmd) string {
	tb.Helper()
	dir := tb.TempDir()
	for _, c := range cmds {
		pid := strconv.Itoa(c.Process.Pid)
		if err := os.Symlink("/proc/"+pid, filepath.Join(dir, pid)); err != nil {
			tb.Fatal(err)
		}
	}
	return dir
}

// startAll starts n processes of argv and stops them when tb ends.
func startAll(tb testing.TB, n int, argv ...string) []*exec.Cmd {
	tb.Helper()
	var cmds []*exec.Cmd
	tb.Cleanup(func() {
		for _, c := range cmds {
			c.Process.Kill()
			c.Wait()
		}
	})
	for range n {
		c := exec.Command(argv[0], argv[1:]...)
		if err := c.Start(); err != nil {
			tb.Fatal(err)
		}
		cmds = append(cmds, c)
	}
	return cmds
}

// waitSleeping waits until each of cmds sleeps (state S in its stat):
// past exec, the loader and libc are still mapping and touching pages, so
// a process's memory moves until then.
func waitSleeping(tb testing.TB, cmds []*exec.Cmd) {
	tb.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for _, c := range cmds {
		for {
			b, err := os.ReadFile("/proc/" + strconv.Itoa(c.Process.Pid) + "/stat")
			if err != nil {
				tb.Fatal(err)
			}
			// The state follows the command name's closing parenthesis.
			if i := bytes.LastIndexByte(b, ')'); i >= 0 && i+2 < len(b) && b[i+2] == 'S' {
				break
			}
			if time.Now().After(deadline) {
				tb.Fatalf("pid %d does not sleep: %s", c.Process.Pid, b)
			}
			time.Sleep(time.Millisecond)
		}
	}
}

// TestGuardUsage: the guard counts each process's memory and the bytes on
// its tmpfs mounts; over the limit, by Pss; a process it cannot read the
// smaps of counts by its resident set.
func TestGuardUsage(t *testing.T) {
	cmds := startAll(t, 3, "/bin/sleep", "60")
	waitSleeping(t, cmds)
	g := &guard{proc: procOf(t, cmds), page: int64(os.Getpagesize()), buf: make([]byte, 4096)}
	tmp := t.TempDir()
	g.tmpfs = []string{tmp}
	var rss, pss int64
	for _, c := range cmds {
		pid := strconv.Itoa(c.Process.Pid)
		n, ok := g.pss(pid)
		if !ok || n <= 0 || g.rss(pid) < n {
			t.Fatalf("pid %s: pss %d %v, rss %d", pid, n, ok, g.rss(pid))
		}
		rss, pss = rss+g.rss(pid), pss+n
	}
	g.limit = 1 << 40
	if got, err := g.usage(); err != nil || got < rss {
		t.Errorf("under the limit: %d %v, want at least the resident sets, %d", got, err, rss)
	}
	g.limit = 0 // over: measured by Pss, which counts a shared page once
	if got, err := g.usage(); err != nil || got >= rss || got < pss/2 {
		t.Errorf("over the limit: %d %v, want about %d (rss %d)", got, err, pss, rss)
	}
	if g.tmpfsUsed() != 0 {
		t.Error("a directory that is not a tmpfs mount counted")
	}
	g.tmpfs = []string{"/dev/shm"}
	f, err := os.CreateTemp("/dev/shm", "guard-test-")
	if err != nil {
		t.Skipf("no /dev/shm: %v", err)
	}
	defer os.Remove(f.Name())
	before := g.tmpfsUsed()
	f.Write(make([]byte, 8<<20))
	f.Close()
	if got := g.tmpfsUsed() - before; got < 8<<20 {
		t.Errorf("8 MiB on /dev/shm counted as %d bytes", got)
	}
}

func TestSizeText(t *testing.T) {
	for n, want := range map[int64]string{256 << 20: "256 MiB", 4 << 30: "4 GiB", 1181116006: "1.1 GiB", 512 << 10: "512 KiB"} {
		if got := sizeText(n); got != want {
			t.Errorf("sizeText(%d) = %q, want %q", n, got, want)
		}
	}
}

// cpuTime is the CPU this process has used, user and system, in ns.
func cpuTime() int64 {
	var ru unix.Rusage
	unix.Getrusage(unix.RUSAGE_SELF, &ru)
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// BenchmarkGuardPoll measures one poll of the memory guard for an agent of
// 1, 10 and 100 processes: under the limit (statm only) and over it
// (smaps_rollup too). sleep is a small process; node, with its hundreds
// of mappings, is what agents are made of.
func BenchmarkGuardPoll(b *testing.B) {
	type load struct {
		name string
		n    int
		argv []string
	}
	loads := []load{{"sleep", 1, []string{"/bin/sleep", "600"}}, {"sleep", 10, []string{"/bin/sleep", "600"}}, {"sleep", 100, []string{"/bin/sleep", "600"}}}
	if node, err := exec.LookPath("node"); err == nil {
		loads = append(loads, load{"node", 1, []string{node, "-e", "setTimeout(() => {}, 600000)"}}, load{"node", 10, []string{node, "-e", "setTimeout(() => {}, 600000)"}})
	}
	for _, ld := range loads {
		cmds := startAll(b, ld.n, ld.argv...)
		for _, over := range []bool{false, true} {
			name := ld.name + "-" + strconv.Itoa(ld.n) + "/under"
			if over {
				name = ld.name + "-" + strconv.Itoa(ld.n) + "/over"
			}
			b.Run(name, func(b *testing.B) {
				g := &guard{proc: procOf(b, cmds), tmpfs: agentTmpfs, page: int64(os.Getpagesize()), buf: make([]byte, 4096), limit: 1 << 40}
				if over {
					g.limit = 0
				}
				before := cpuTime()
				for b.Loop() {
					if _, err := g.usage(); err != nil {
						b.Fatal(err)
					}
				}
				// The machine may be busy: what a poll costs is its CPU
				// time (user and system), not how long it waited.
				b.ReportMetric(float64(cpuTime()-before)/float64(b.N), "cpu-ns/op")
			})
		}
	}
}
