package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/sparkles-dev/sparkles/internal/coordinator"
	"github.com/sparkles-dev/sparkles/sandbox"
)

// EnvChild names the environment variable that makes a process the server
// side of the idle and stall scenarios (RunChild); its value is the
// directory of the store. The memory figures of those scenarios are read
// from the child's /proc status, so they hold the server alone and not the
// thousands of client connections in the parent.
const EnvChild = "SPARKLES_BENCH_CHILD"

// The child's control protocol: one JSON request per line on its stdin, one
// JSON reply per line on its stdout. The first line it writes, unasked, is
// its address and token. It exits when its stdin closes.
type childRequest struct {
	Op   string   `json:"op"` // create, tools, load, stop, mem, profile, cpu; turns, settle, wake (agents); flood, floodnew, unflood, filltools, file (peer); heads (webhooks)
	N    int      `json:"n,omitempty"`
	Fill int      `json:"fill,omitempty"` // events appended to each new sandbox
	IDs  []string `json:"ids,omitempty"`
	Rate float64  `json:"rate,omitempty"` // events/s over all of IDs
	Size int      `json:"size,omitempty"`
	GC   bool     `json:"gc,omitempty"`
	Path string   `json:"path,omitempty"` // where profile writes; cpu: start profiling to path, or stop when empty
	// Times makes a load record when each append returned (webhooks).
	Times bool `json:"times,omitempty"`
}

type childReply struct {
	Addr       string    `json:"addr,omitempty"`
	Token      string    `json:"token,omitempty"`
	IDs        []string  `json:"ids,omitempty"`
	Appended   int64     `json:"appended,omitempty"`
	Lasts      []uint64  `json:"lasts,omitempty"` // stop: the last id appended to each sandbox of the load; heads: each sandbox's last event id
	HeapInuse  uint64    `json:"heap_inuse,omitempty"`
	StackInuse uint64    `json:"stack_inuse,omitempty"`
	Goroutines int       `json:"goroutines,omitempty"`
	Streams    int64     `json:"streams"`
	Delivered  int64     `json:"delivered,omitempty"`
	Millis     []float64 `json:"millis,omitempty"` // wake: each turn's time to its first durable event
	Writes     int64     `json:"writes,omitempty"` // the batches the deliveries were written in
	File       *fileInfo `json:"file,omitempty"`   // file: the store file against what the sandbox holds
	Err        string    `json:"err,omitempty"`

	// Returned is, by sandbox of a load with Times, when each append
	// returned.
	Returned [][]appendTime `json:"returned,omitempty"`
}

// RunChild runs the server of a benchmark in this process, answering the
// parent's requests on in and out until in closes (the parent closes it
// when it is done, or dies). Events are
// appended by a load generator inside the child, through
// coordinator.AppendEvents as the agent runtime would, at the rate the
// parent asks.
func RunChild(ctx context.Context, dir string, in io.Reader, out io.Writer) error {
	if os.Getenv(EnvChildFloor) != "" {
		return runFloorChild(ctx, in, out)
	}
	raiseFileLimit(1 << 20)
	agents, err := childAgents()
	if err != nil {
		return err
	}
	l, err := startLocal(dir, newLogger(os.Stderr), agents)
	if err != nil {
		return err
	}
	defer l.close()
	defer cpuProfile("")
	var ld *loader
	floods := map[string]string{} // sandbox id -> its flooding turn
	defer func() {
		if ld != nil {
			ld.stop()
		}
	}()
	return answer(in, out, childReply{Addr: l.addr, Token: l.token}, func(req childRequest, rep *childReply) error {
		var err error
		switch req.Op {
		case "create":
			if rep.IDs, err = createSandboxes(ctx, l.coord, req.N); err == nil && req.Fill > 0 {
				err = fill(ctx, l.coord, rep.IDs, req.Fill, req.Size)
			}
		case "tools":
			if rep.IDs, err = createSandboxes(ctx, l.coord, 1); err == nil {
				err = appendTools(ctx, l.coord, rep.IDs[0], req.Fill, req.Size)
			}
		case "load":
			if ld != nil {
				err = errors.New("a load is already running")
				break
			}
			ld = startLoader(l.coord, req.IDs, req.Rate, req.Size, req.Times)
		case "stop":
			if ld != nil {
				rep.Appended, rep.Lasts, err = ld.stop()
				rep.Returned = ld.returned
				ld = nil
			}
		case "heads":
			rep.Lasts = make([]uint64, len(req.IDs))
			for i, id := range req.IDs {
				h, herr := l.store.Head(id)
				rep.Lasts[i], err = h.LastEventID, errors.Join(err, herr)
			}
		case "mem":
			if req.GC {
				// Each collection may halve an idle goroutine's stack;
				// the last returns freed memory to the OS, so RSS shows
				// what is live rather than what was not yet given back.
				for range 4 {
					runtime.GC()
				}
				debug.FreeOSMemory()
			}
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			rep.HeapInuse, rep.StackInuse, rep.Goroutines = ms.HeapInuse, ms.StackInuse, runtime.NumGoroutine()
		case "turns":
			err = runTurns(ctx, l, req.IDs)
		case "settle":
			err = l.streams.agents.waitNone(ctx)
		case "wake":
			rep.Millis, err = wakeTurns(ctx, l, req.IDs)
		case "flood", "floodnew": // floodnew: a new tool call per update
			prompt := floodCycle
			if req.Op == "floodnew" {
				prompt = floodNew
			}
			err = startFloods(ctx, l, req.IDs, prompt, floods)
		case "unflood":
			err = stopFloods(ctx, l, floods)
		case "filltools":
			if rep.IDs, err = createSandboxes(ctx, l.coord, 1); err == nil {
				g := &toolTurns{size: req.Fill}
				err = g.append(ctx, l, rep.IDs[0], req.N)
			}
		case "file":
			var u fileUse
			if u, err = measureFile(ctx, l, req.IDs[0]); err == nil {
				rep.File = &fileInfo{File: u.file, InUse: u.inUse, Events: u.events, EventN: u.eventN}
			}
		case "profile":
			err = writeProfiles(req.Path)
		case "cpu":
			err = cpuProfile(req.Path)
		default:
			err = fmt.Errorf("unknown op %q", req.Op)
		}
		rep.Streams, rep.Delivered, rep.Writes = l.streams.open.Load(), l.streams.delivered.Load(), l.streams.writes.Load()
		return err
	})
}

// answer writes first, then answers each request read from in with handle's
// reply on out, an error of handle's in the reply's Err, until in closes.
func answer(in io.Reader, out io.Writer, first childReply, handle func(req childRequest, rep *childReply) error) error {
	enc := json.NewEncoder(out)
	if err := enc.Encode(first); err != nil {
		return err
	}
	sc := bufio.NewScanner(in)
	sc.Buffer(nil, 16<<20)
	for sc.Scan() {
		var req childRequest
		if err := json.Unmarshal(sc.Bytes(), &req); err != nil {
			return fmt.Errorf("bench child: bad request %q: %w", sc.Bytes(), err)
		}
		var rep childReply
		if err := handle(req, &rep); err != nil {
			rep.Err = err.Error()
		}
		if err := enc.Encode(rep); err != nil {
			return err
		}
	}
	return sc.Err()
}

// cpuFile is the CPU profile being written, if any.
var cpuFile *os.File

// cpuProfile starts profiling this process's CPU into path, or stops and
// writes out the profile when path is empty.
func cpuProfile(path string) error {
	if path == "" {
		if cpuFile == nil {
			return nil
		}
		pprof.StopCPUProfile()
		err := cpuFile.Close()
		cpuFile = nil
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return err
	}
	cpuFile = f
	return nil
}

// writeProfiles writes the heap and goroutine profiles of this process to
// path.heap.pprof and path.goroutine.pprof.
func writeProfiles(path string) error {
	runtime.GC()
	for _, name := range []string{"heap", "goroutine"} {
		f, err := os.Create(path + "." + name + ".pprof")
		if err != nil {
			return err
		}
		err = pprof.Lookup(name).WriteTo(f, 0)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// fill appends n events of size bytes to each sandbox, in batches.
func fill(ctx context.Context, co *coordinator.Coordinator, ids []string, n, size int) error {
	return parallel(ctx, len(ids), 8, func(ctx context.Context, i int) error {
		for done := 0; done < n; {
			evs := make([]*sandbox.Event, min(500, n-done))
			for j := range evs {
				evs[j] = newEvent(size)
			}
			if err := co.AppendEvents(ctx, ids[i], evs...); err != nil {
				return err
			}
			done += len(evs)
		}
		return nil
	})
}

// appendTools appends a turn with n tool calls to sandbox id, each with a
// title of size bytes: the turn is left running, so every snapshot holds
// them all.
func appendTools(ctx context.Context, co *coordinator.Coordinator, id string, n, size int) error {
	const turn = "turn_bench"
	err := co.AppendEvents(ctx, id, &sandbox.Event{Type: sandbox.TypeTurnStarted, TurnID: turn, Data: &sandbox.TurnStarted{Input: sandbox.TextInput("bench")}})
	if err != nil {
		return err
	}
	title := strings.Repeat("t", size)
	for done := 0; done < n; {
		evs := make([]*sandbox.Event, min(1000, n-done))
		for i := range evs {
			evs[i] = &sandbox.Event{Type: sandbox.TypeToolUpdated, TurnID: turn, Data: &sandbox.ToolUpdated{
				ToolCallID: fmt.Sprintf("tool_%06d", done+i), Title: title, Kind: "read", Status: "completed",
				Locations: []sandbox.Location{{Path: fmt.Sprintf("src/file_%06d.go", done+i)}},
			}}
		}
		if err := co.AppendEvents(ctx, id, evs...); err != nil {
			return err
		}
		done += len(evs)
	}
	return nil
}

// loader appends events to sandboxes at a steady rate: one goroutine per
// sandbox, each on a ticker, each waiting for its append to be durable as
// the agent runtime does.
type loader struct {
	cancel   context.CancelFunc
	wg       sync.WaitGroup
	appended atomic.Int64
	lasts    []uint64 // by sandbox; each written by its goroutine only
	mu       sync.Mutex
	err      error

	returned [][]appendTime // by sandbox, when times were asked for; as lasts
}

func startLoader(co *coordinator.Coordinator, ids []string, rate float64, size int, times bool) *loader {
	ctx, cancel := context.WithCancel(context.Background())
	ld := &loader{cancel: cancel, lasts: make([]uint64, len(ids))}
	if times {
		ld.returned = make([][]appendTime, len(ids))
	}
	if len(ids) == 0 || rate <= 0 {
		return ld
	}
	every := time.Duration(float64(time.Second) * float64(len(ids)) / rate)
	tickSpread(ctx, &ld.wg, len(ids), every, func(i int) bool {
		ev := newEvent(size)
		called := time.Now().UnixNano()
		if err := co.AppendEvents(ctx, ids[i], ev); err != nil {
			if ctx.Err() == nil {
				ld.mu.Lock()
				ld.err = errors.Join(ld.err, err)
				ld.mu.Unlock()
			}
			return false
		}
		if ld.returned != nil {
			ld.returned[i] = append(ld.returned[i], appendTime{ID: ev.ID, Called: called, At: time.Now().UnixNano()})
		}
		ld.lasts[i] = ev.ID
		ld.appended.Add(1)
		return true
	})
	return ld
}

// tickSpread calls tick(i) for each of n sandboxes on a goroutine of its
// own, once per period every, their ticks spread over the period, as
// independent agents' are, not fired together, until ctx ends or tick
// returns false.
func tickSpread(ctx context.Context, wg *sync.WaitGroup, n int, every time.Duration, tick func(i int) bool) {
	for i := range n {
		wg.Go(func() {
			select {
			case <-ctx.Done():
				return
			case <-time.After(every * time.Duration(i) / time.Duration(n)):
			}
			t := time.NewTicker(every)
			defer t.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-t.C:
				}
				if !tick(i) {
					return
				}
			}
		})
	}
}

// appendTime is when the append of event ID was called and when it
// returned, committed and durable: the commit lies between. Both are the
// wall clock's, in ns, so that they compare with another process's
// reading of the same clock.
type appendTime struct {
	ID     uint64 `json:"id"`
	Called int64  `json:"called"`
	At     int64  `json:"at"`
}

func (ld *loader) stop() (int64, []uint64, error) {
	ld.cancel()
	ld.wg.Wait()
	return ld.appended.Load(), ld.lasts, ld.err
}

// load has the child append to ids at rate events/s in all for d, then
// waits until every subscriber has read the last event of its sandbox:
// lastsFor maps the last id of each of ids onto subs. It returns the
// child's answer to the stop.
func (c *child) load(ctx context.Context, subs []*subscriber, ids []string, rate float64, d time.Duration, lastsFor func([]uint64) []uint64) (childReply, error) {
	if _, err := c.do(ctx, childRequest{Op: "load", IDs: ids, Rate: rate, Size: eventSize}); err != nil {
		return childReply{}, err
	}
	if err := sleepCtx(ctx, d); err != nil {
		return childReply{}, err
	}
	end, err := c.do(ctx, childRequest{Op: "stop"})
	if err != nil {
		return childReply{}, err
	}
	return end, waitAll(ctx, subs, lastsFor(end.Lasts))
}

// child is the parent's handle on a RunChild process.
type child struct {
	cmd     *exec.Cmd
	in      io.WriteCloser
	replies chan childReply
	exited  chan struct{}
	stderr  *tailBuffer
	addr    string
	token   string
	mu      sync.Mutex // one request at a time
}

// startChild starts argv with EnvChild set to dir and waits for its address.
// env adds variables of the scenario's own (see EnvChildAgent).
func startChild(ctx context.Context, argv []string, dir string, env ...string) (*child, error) {
	if len(argv) == 0 {
		return nil, errors.New("this scenario runs the server as a child process, and no child command is configured")
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(append(os.Environ(), EnvChild+"="+dir), env...)
	// One reply may arrive after its caller gave up; the buffer keeps the
	// reader from blocking on it until the child is closed.
	c := &child{cmd: cmd, replies: make(chan childReply, 1), exited: make(chan struct{}), stderr: &tailBuffer{}}
	cmd.Stderr = c.stderr
	var err error
	if c.in, err = cmd.StdinPipe(); err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	go func() {
		defer close(c.exited)
		dec := json.NewDecoder(out)
		for {
			var rep childReply
			if err := dec.Decode(&rep); err != nil {
				_ = cmd.Wait()
				return
			}
			c.replies <- rep
		}
	}()
	first, err := c.reply(ctx)
	if err != nil {
		c.close()
		return nil, err
	}
	c.addr, c.token = first.Addr, first.Token
	return c, nil
}

func (c *child) reply(ctx context.Context) (childReply, error) {
	select {
	case rep := <-c.replies:
		if rep.Err != "" {
			return rep, fmt.Errorf("bench child: %s", rep.Err)
		}
		return rep, nil
	case <-c.exited:
		return childReply{}, fmt.Errorf("bench child exited: %s", c.stderr)
	case <-ctx.Done():
		return childReply{}, ctx.Err()
	}
}

func (c *child) do(ctx context.Context, req childRequest) (childReply, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	b, err := json.Marshal(req)
	if err != nil {
		return childReply{}, err
	}
	if _, err := c.in.Write(append(b, '\n')); err != nil {
		return childReply{}, fmt.Errorf("bench child: %w: %s", err, c.stderr)
	}
	return c.reply(ctx)
}

// close ends the child: its stdin closes, it shuts its server down and
// exits; one that does not within a while is killed.
func (c *child) close() {
	c.in.Close()
	select {
	case <-c.exited:
	case <-time.After(30 * time.Second):
		_ = c.cmd.Process.Kill()
		<-c.exited
	}
}

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

// tailBuffer keeps the last few KiB of what a child writes to stderr, for
// the error that says why it ended.
type tailBuffer struct {
	mu  sync.Mutex
	buf []byte
}

const tailMax = 8 << 10

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if len(t.buf) > tailMax {
		t.buf = append(t.buf[:0], t.buf[len(t.buf)-tailMax:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(bytes.TrimSpace(t.buf))
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
