package bench

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// What the bench reads of a process and of the machine from /proc (memory
// and CPU time), and the open-file limit it raises.

// procMem is what /proc/PID/status says of a process's memory, in bytes.
type procMem struct {
	RSS  int64 // VmRSS: anonymous and file pages (bbolt's mmap) resident
	Anon int64 // RssAnon: the heap, stacks and runtime, without the mmap
	File int64 // RssFile: the pages of mapped files resident, bbolt's among them
}

func (c *child) mem() (procMem, error) { return readProcMem(c.cmd.Process.Pid) }

// cpu is the CPU time the child has used, user and system, from
// /proc/PID/stat (in USER_HZ ticks, 100 a second on Linux).
func (c *child) cpu() (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", c.cmd.Process.Pid))
	if err != nil {
		return 0, err
	}
	// The command name, in parentheses, may hold spaces: fields count
	// from the last ')'.
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", c.cmd.Process.Pid, len(f))
	}
	var ticks int64
	for _, v := range f[11:13] { // utime, stime
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/%d/stat: %w", c.cmd.Process.Pid, err)
		}
		ticks += n
	}
	return time.Duration(ticks) * 10 * time.Millisecond, nil
}

// cpuTicks is the machine's CPU time from the first line of /proc/stat,
// in USER_HZ ticks summed over its CPUs: all of it, and the part neither
// idle nor waiting for I/O.
type cpuTicks struct{ total, busy int64 }

// machineCPU reads the machine's CPU time so far.
func machineCPU() (cpuTicks, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return cpuTicks{}, err
	}
	return parseStat(b)
}

// parseStat reads the machine's ticks from the contents of /proc/stat.
func parseStat(b []byte) (cpuTicks, error) {
	line, _, _ := bytes.Cut(b, []byte("\n"))
	f := strings.Fields(string(line))
	if len(f) < 9 || f[0] != "cpu" {
		return cpuTicks{}, fmt.Errorf("/proc/stat: unexpected first line %q", line)
	}
	var t cpuTicks
	for i, v := range f[1:9] { // user nice system idle iowait irq softirq steal
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return cpuTicks{}, fmt.Errorf("/proc/stat: %w", err)
		}
		t.total += n
		if i != 3 && i != 4 {
			t.busy += n
		}
	}
	return t, nil
}

// usage is the CPU time the child and the machine had used at one
// moment; machineErr says /proc/stat could not be read.
type usage struct {
	child      time.Duration
	machine    cpuTicks
	machineErr error
}

func (c *child) usage() (usage, error) {
	cpu, err := c.cpu()
	if err != nil {
		return usage{}, err
	}
	m, err := machineCPU()
	return usage{child: cpu, machine: m, machineErr: err}, nil
}

// since returns the child's CPU time from u0 to u and the share of the
// machine's CPU time, in percent, that was busy meanwhile, with false
// where that share is not known.
func (u usage) since(u0 usage) (cpu time.Duration, busy float64, ok bool) {
	cpu = u.child - u0.child
	if u0.machineErr != nil || u.machineErr != nil || u.machine.total <= u0.machine.total {
		return cpu, 0, false
	}
	return cpu, 100 * float64(u.machine.busy-u0.machine.busy) / float64(u.machine.total-u0.machine.total), true
}

// busyConditions says what a machine CPU busy figure counts.
const busyConditions = "; the machine's CPU time over the run that was neither idle nor waiting for I/O (/proc/stat): the server's, the benchmark's own and anything else's"

func readProcMem(pid int) (procMem, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return procMem{}, err
	}
	var m procMem
	for line := range bytes.Lines(b) {
		name, value, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			continue
		}
		var dst *int64
		switch string(name) {
		case "VmRSS":
			dst = &m.RSS
		case "RssAnon":
			dst = &m.Anon
		case "RssFile":
			dst = &m.File
		default:
			continue
		}
		f := bytes.Fields(value) // "1234 kB"
		if len(f) == 0 {
			continue
		}
		kb, err := strconv.ParseInt(string(f[0]), 10, 64)
		if err != nil {
			return procMem{}, fmt.Errorf("/proc/%d/status: %q: %w", pid, line, err)
		}
		*dst = kb << 10
	}
	if m.RSS == 0 {
		return procMem{}, fmt.Errorf("/proc/%d/status has no VmRSS", pid)
	}
	return m, nil
}

// raiseFileLimit raises this process's open-file limit to want, or as far
// as it goes, and returns the soft limit it ends with. Idle connections
// take one descriptor each on both sides.
func raiseFileLimit(want uint64) uint64 {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0
	}
	if lim.Cur >= want {
		return lim.Cur
	}
	// Raising the hard limit needs privilege; without it, the soft limit
	// still goes up to the hard one.
	try := syscall.Rlimit{Cur: want, Max: max(lim.Max, want)}
	if syscall.Setrlimit(syscall.RLIMIT_NOFILE, &try) != nil {
		try = syscall.Rlimit{Cur: lim.Max, Max: lim.Max}
		_ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &try)
	}
	_ = syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim)
	return lim.Cur
}
