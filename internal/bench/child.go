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
	"sync"
	"time"
)

// The child process that runs a scenario's server: its control protocol,
// RunChild, the server side that answers it, and child, the parent's handle
// on it.

// EnvChild names the environment variable that makes a process the server
// side of the scenarios that run it apart (RunChild: idle, stall, the
// second half of fanout, agents, webhooks, the data dirs of coldstart and
// crashstart, among others); its value is the directory of the store. The
// memory figures of those scenarios are read from the child's /proc
// status, so they hold the server alone and not the thousands of client
// connections in the parent.
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
