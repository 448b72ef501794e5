package confine

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// The memory guard bounds an agent's memory where no cgroup can (a server
// that is not root and has no delegated cgroup v2, the common laptop case).
// It runs in the launcher, which is PID 1 of the agent's PID namespace, so
// its /proc lists the agent's processes and no others. Every guardEvery it
// adds up what they use and what the agent's own tmpfs mounts hold; past
// the limit it says so on stderr (agent.log) and exits with exitMemory, and
// the kernel kills everything in the namespace with it.
//
// What it counts: the proportional set size (Pss) of every process, so a
// page shared by several counts once, as a cgroup counts it, plus the bytes
// used on /tmp and /dev/shm (tmpfs pages are memory, and outlive the
// process that wrote them). A tmpfs file a process also maps counts twice;
// that errs on the side of the limit. What it does not see: memory the
// kernel holds for the agent (socket buffers, page tables) and a memfd's
// pages that no process maps; a cgroup bounds those, the guard does not.
//
// Granularity: it polls every guardEvery, and ten times as often once the
// agent holds half its limit; what is allocated between two polls goes
// unseen until the next (BENCHMARKS.md has the overshoot of fast
// allocators and of a tmpfs writer).
//
// Not RLIMIT_DATA: it would stop one process's allocation at once, but it
// counts writable address space, not memory. Node starts under it (V8's
// reservations are PROT_NONE), but a Go binary needs more than 64 MiB of
// it to start, one built with -race holds 294 MiB before main, and
// AddressSanitizer reserves terabytes: an agent running `go test -race` or
// a sanitized build would fail under the guard and nowhere else.
//
// Cost: reading smaps_rollup walks a process's page tables (0.3 ms of CPU
// for an idle node), statm reads counters (about 10 µs a process). So the
// guard sums the resident sets of statm, which are never below Pss, and
// reads smaps_rollup only when that sum passes the limit (many processes
// sharing pages: node workers). A poll that took long is followed by a
// longer wait, so that the guard never takes more than a twentieth of a
// CPU.
const (
	guardEvery = 100 * time.Millisecond
	// exitMemory is the launcher's exit status when the guard stopped the
	// agent.
	exitMemory = 122
	// minMemoryMax is the least memory limit New takes: node alone holds
	// 40 MiB, the launcher 10.
	minMemoryMax = 64 << 20
)

// agentTmpfs are the tmpfs mounts the launcher makes for the agent alone.
var agentTmpfs = []string{"/tmp", "/dev/shm"}

type guard struct {
	limit int64
	every time.Duration
	proc  string   // the namespace's own /proc
	tmpfs []string // agentTmpfs
	page  int64
	buf   []byte
	names []string
}

// newGuard makes the guard and measures once, so that a guard that could
// not measure fails the launcher (and so the server's start-up probe)
// rather than let the agent run unbounded.
func newGuard(limit int64, every time.Duration) (*guard, error) {
	g := &guard{limit: limit, every: every, proc: "/proc", tmpfs: agentTmpfs, page: int64(os.Getpagesize()), buf: make([]byte, 4096)}
	if _, err := g.usage(); err != nil {
		return nil, fmt.Errorf("memory guard: %w", err)
	}
	return g, nil
}

// run polls until the agent is over its limit, then stops it; it never
// returns.
func (g *guard) run() {
	for {
		start := time.Now()
		used, err := g.usage()
		wait := g.every
		if used > g.limit/2 {
			wait = g.every / 10
		}
		if err != nil || used <= g.limit {
			time.Sleep(max(wait, 19*time.Since(start)))
			continue
		}
		fmt.Fprintf(os.Stderr, "sparkles launcher: the agent used %s of memory, over its limit of %s (--agent-memory-max); stopped\n", sizeText(used), sizeText(g.limit))
		os.Exit(exitMemory)
	}
}

// usage is what the agent's processes and tmpfs mounts hold, in bytes.
func (g *guard) usage() (int64, error) {
	pids, err := g.pids()
	if err != nil {
		return 0, err
	}
	tmp := g.tmpfsUsed()
	rss := int64(0)
	for _, pid := range pids {
		rss += g.rss(pid)
	}
	if rss+tmp <= g.limit {
		return rss + tmp, nil
	}
	pss := int64(0)
	for _, pid := range pids {
		n, ok := g.pss(pid)
		if !ok {
			// A process that made itself undumpable hides its smaps
			// from a launcher without CAP_SYS_PTRACE, not its statm.
			n = g.rss(pid)
		}
		pss += n
	}
	return pss + tmp, nil
}

// pids lists the processes of the namespace.
func (g *guard) pids() ([]string, error) {
	f, err := os.Open(g.proc)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	names, err := f.Readdirnames(-1)
	if err != nil {
		return nil, err
	}
	g.names = g.names[:0]
	for _, n := range names {
		if n != "" && n[0] >= '1' && n[0] <= '9' {
			g.names = append(g.names, n)
		}
	}
	return g.names, nil
}

// read reads a small /proc file into g.buf; nil when the process is gone.
func (g *guard) read(pid, file string) []byte {
	fd, err := unix.Open(g.proc+"/"+pid+"/"+file, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil
	}
	defer unix.Close(fd)
	n := 0
	for n < len(g.buf) {
		m, err := unix.Read(fd, g.buf[n:])
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil || m == 0 {
			break
		}
		n += m
	}
	return g.buf[:n]
}

// rss is a process's resident set from statm: size resident shared …, in pages.
func (g *guard) rss(pid string) int64 {
	b := g.read(pid, "statm")
	_, rest, ok := bytes.Cut(b, []byte(" "))
	if !ok {
		return 0
	}
	field, _, _ := bytes.Cut(rest, []byte(" "))
	n, err := strconv.ParseInt(string(field), 10, 64)
	if err != nil {
		return 0
	}
	return n * g.page
}

// pss is a process's proportional set size from smaps_rollup.
func (g *guard) pss(pid string) (int64, bool) {
	b := g.read(pid, "smaps_rollup")
	_, rest, ok := bytes.Cut(b, []byte("\nPss:"))
	if !ok {
		return 0, false
	}
	line, _, _ := bytes.Cut(rest, []byte("\n"))
	kb, err := strconv.ParseInt(string(bytes.TrimSpace(bytes.TrimSuffix(bytes.TrimSpace(line), []byte("kB")))), 10, 64)
	if err != nil {
		return 0, false
	}
	return kb << 10, true
}

// tmpfsUsed is what the agent's tmpfs mounts hold.
func (g *guard) tmpfsUsed() int64 {
	var total int64
	for _, p := range g.tmpfs {
		var st unix.Statfs_t
		if unix.Statfs(p, &st) != nil || st.Type != unix.TMPFS_MAGIC {
			continue
		}
		total += int64(st.Blocks-st.Bfree) * st.Bsize
	}
	return total
}

// sizeText writes n bytes for people: 256 MiB, 1.1 GiB.
func sizeText(n int64) string {
	switch {
	case n >= 1<<30:
		s := strconv.FormatFloat(float64(n)/(1<<30), 'f', 1, 64)
		if len(s) > 2 && s[len(s)-2:] == ".0" {
			s = s[:len(s)-2]
		}
		return s + " GiB"
	case n >= 1<<20:
		return strconv.FormatInt(n>>20, 10) + " MiB"
	default:
		return strconv.FormatInt(n>>10, 10) + " KiB"
	}
}
