//go:build linux

package confine_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/sparkles-dev/sparkles/internal/agent"
	"github.com/sparkles-dev/sparkles/internal/confine"
)

const memoryMax = 256 << 20

// memoryOutcome is what became of a hostile agent that took memory.
type memoryOutcome struct {
	report map[string]probeResult // nil when the turn did not end
	exit   *agent.ExitError       // how the agent ended; nil while it runs
	stderr string                 // its agent.log
	held   int                    // MiB its probes held at most, over all their processes
}

// stopped says whether the agent's limits stopped it, naming the flag.
func (o memoryOutcome) stopped() bool {
	return o.exit != nil && strings.Contains(o.exit.Reason, "memory limit of 256 MiB (--agent-memory-max)")
}

func (o memoryOutcome) String() string {
	b, _ := json.Marshal(o.report)
	var exit string
	if o.exit != nil {
		exit = o.exit.Error()
	}
	return "report " + string(b) + "; exit " + strconv.Quote(exit) + "; held " + strconv.Itoa(o.held) + " MiB; agent.log " + strconv.Quote(o.stderr)
}

// lockedBuffer is an agent's stderr.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// memoryRun boots the hostile agent with l, runs one turn of the probes
// env names and, when untilExit, waits for the agent to end (the guard
// stops it within a poll of its turn) rather than stop it.
func memoryRun(t testing.TB, l *confine.Launcher, base string, env map[string]string, untilExit bool) memoryOutcome {
	t.Helper()
	sb := sandboxDir(t, base, "c_memory_"+strings.NewReplacer("/", "_").Replace(t.Name()))
	var stderr lockedBuffer
	cfg := agent.Config{
		Command:  []string{hostile},
		Dir:      filepath.Join(sb, "work"),
		Env:      []string{"PATH=/usr/bin:/bin", "HOSTILE_MARKER=" + strconv.Itoa(os.Getpid())},
		Logger:   slog.New(slog.DiscardHandler),
		Launcher: l,
		Sandbox:  sb,
		Stderr:   &stderr,
	}
	for k, v := range env {
		cfg.Env = append(cfg.Env, k+"="+v)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	c, err := agent.Start(ctx, cfg)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	defer c.Close()
	if err := c.Prompt("turn_1", "probe"); err != nil {
		t.Fatal(err)
	}
	var out memoryOutcome
	for in := range inbox(ctx, c) {
		if in.Kind == agent.PromptDone {
			b, err := os.ReadFile(filepath.Join(sb, "work", "report.json"))
			if err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(b, &out.report); err != nil {
				t.Fatal(err)
			}
			if !untilExit {
				break
			}
		}
		if in.Kind == agent.Exited {
			if !errors.As(in.Err, &out.exit) {
				t.Fatalf("the agent ended: %v", in.Err)
			}
			break
		}
	}
	if ctx.Err() != nil {
		t.Fatalf("the agent neither finished its turn nor ended within %s", waitLimit)
	}
	c.Close()
	<-c.Done()
	out.stderr = stderr.String()
	ents, _ := filepath.Glob(filepath.Join(sb, "work", "memory-*.progress"))
	for _, p := range ents {
		b, _ := os.ReadFile(p)
		n, _ := strconv.Atoi(strings.TrimSpace(string(b)))
		out.held += n
	}
	return out
}

// inbox is c's inbox until ctx ends.
func inbox(ctx context.Context, c *agent.Conn) <-chan agent.Inbound {
	out := make(chan agent.Inbound)
	go func() {
		defer close(out)
		for {
			select {
			case in, ok := <-c.Inbox():
				if !ok {
					return
				}
				select {
				case out <- in:
				case <-ctx.Done():
					return
				}
			case <-ctx.Done():
				return
			}
		}
	}()
	return out
}

// TestMemoryLimit: an agent's memory, its tmpfs mounts counted in, is
// bounded in every mode this machine has: a cgroup where the server may
// make one (v1 as root here), and the launcher's guard where it may not.
// The unprivileged server, which has neither cgroup, is TestUnprivileged.
func TestMemoryLimit(t *testing.T) {
	for _, mode := range []string{"cgroup", "guard"} {
		t.Run(mode, func(t *testing.T) {
			if mode == "guard" {
				confine.SetForceGuard(t)
			}
			testMemoryLimit(t)
		})
	}
}

// testMemoryLimit runs the memory probes against a limit of 256 MiB, with
// whatever bounds memory for this process.
func testMemoryLimit(t *testing.T) {
	base := os.Getenv(asUserVar)
	if base == "" {
		base = varTmp(t)
	}
	data := filepath.Join(base, "data")
	os.MkdirAll(data, 0o700)
	l := newLauncher(t, confine.Options{DataDir: data, MemoryMax: memoryMax})
	guard := strings.Contains(l.Isolation(), "guard")
	t.Logf("isolation: %s", l.Isolation())

	t.Run("OK", func(t *testing.T) {
		// Under the limit: nothing happens to the agent.
		// Address space is not memory: an agent may reserve far more than
		// its limit (sanitizers do), as long as it does not touch it.
		o := memoryRun(t, l, base, map[string]string{"HOSTILE_MEMORY": "small=64,spread=96/3", "HOSTILE_FILL": "tmp=/tmp:32,shm=/dev/shm:16",
			"HOSTILE_RESERVE": "space=8192"}, false)
		for _, k := range []string{"memory:small", "memory:spread", "fill:tmp", "fill:shm", "reserve:space"} {
			if !o.report[k].OK {
				t.Errorf("%s under the limit failed: %s", k, o)
			}
		}
		if o.exit != nil {
			t.Errorf("the agent ended: %s", o)
		}
	})
	// node under the limit runs as it would unconfined, with a worker.
	t.Run("Node", func(t *testing.T) {
		node, err := exec.LookPath("node")
		if err != nil {
			if os.Getenv("CI") != "" {
				t.Fatal("CI has node")
			}
			t.Skip("no node here")
		}
		const js = `const { Worker } = require("worker_threads");
const keep = Buffer.alloc(96 << 20, 1);
new Worker("require('worker_threads').parentPort.postMessage(Buffer.alloc(32 << 20, 2).length)", { eval: true })
  .on("message", (n) => console.log("ok", keep.length + n));`
		out, err := runConfined(t, l, sandboxDir(t, base, "c_memory_node"), []string{"PATH=/usr/bin:/bin"}, node, "-e", js)
		if err != nil || !strings.Contains(out, "ok 134217728") {
			t.Fatalf("node under a limit of 256 MiB: %v\n%s", err, out)
		}
	})
	// One process: with a cgroup the kernel kills it at the limit, and
	// the guard stops the agent.
	t.Run("OneProcess", func(t *testing.T) {
		o := memoryRun(t, l, base, map[string]string{"HOSTILE_MEMORY": "big=1024"}, false)
		t.Logf("held at most %d MiB", o.held)
		if !o.stopped() {
			t.Fatalf("the agent took 1 GiB with a limit of 256 MiB: %s", o)
		}
		if o.held >= 1024 {
			t.Errorf("the agent held %d MiB", o.held)
		}
	})
	// Many processes, none over the limit alone: the guard stops them
	// all; a cgroup kills one at a time at the limit.
	t.Run("ManyProcesses", func(t *testing.T) {
		o := memoryRun(t, l, base, map[string]string{"HOSTILE_MEMORY": "spread=1024/8"}, guard)
		t.Logf("held at most %d MiB", o.held)
		switch {
		case guard && (!o.stopped() || !strings.Contains(o.stderr, "sparkles launcher: the agent used ")):
			t.Fatalf("the guard did not stop the agent: %s", o)
		case !o.stopped() && (o.report == nil || o.report["memory:spread"].OK):
			t.Fatalf("the agent took 1 GiB with a limit of 256 MiB: %s", o)
		}
	})
	// tmpfs is memory: what the agent keeps in /tmp and /dev/shm counts.
	// The probe keeps what it wrote when the mount is full, as a hostile
	// agent would, so the agent is over its limit until it is stopped.
	t.Run("Tmpfs", func(t *testing.T) {
		o := memoryRun(t, l, base, map[string]string{"HOSTILE_FILL": "shm=/dev/shm:1024,tmp=/tmp:1024"}, true)
		t.Logf("held at most %d MiB", o.held)
		if !o.stopped() {
			t.Fatalf("the agent was not stopped: %s", o)
		}
	})
}

// TestMaxProcs: --agent-max-procs holds for a server that is root too, in
// every mode (RLIMIT_NPROC does not bind uid 0, so the agent runs as
// another uid; a pids cgroup bounds it where there is one), and the log
// says what bounds it. The unprivileged server is TestUnprivileged.
func TestMaxProcs(t *testing.T) {
	for _, mode := range []string{"cgroup", "guard"} {
		t.Run(mode, func(t *testing.T) {
			if mode == "guard" {
				confine.SetForceGuard(t)
			}
			opts := confine.Options{MaxProcs: 40, DataDir: filepath.Join(varTmp(t), "data")}
			os.Mkdir(opts.DataDir, 0o700)
			attrs := newLauncher(t, opts).LogAttrs()
			procs := ""
			for i := 0; i+1 < len(attrs); i += 2 {
				if attrs[i] == "procs_limit" {
					procs, _ = attrs[i+1].(string)
				}
			}
			if procs == "" || strings.HasPrefix(procs, "unbounded") {
				t.Errorf("the log says processes are bounded by %q", procs)
			}
			r := hostileRun(t, opts, map[string]string{"HOSTILE_FORK": "sleepers=100"})
			if n, _ := strconv.Atoi(r["fork:sleepers"].Detail); r["fork:sleepers"].OK || n >= 40 {
				t.Errorf("the agent started %d of 100 processes with a limit of 40 (%s): %+v", n, procs, r["fork:sleepers"])
			}
		})
	}
}

// BenchmarkGuardOvershoot measures how far past its limit (256 MiB) an
// agent gets under the memory guard before it is stopped: 1 and 8
// processes that allocate and touch memory as fast as they can, and one
// that writes /tmp as fast as it can. The figure is the MiB the probes held when the
// agent was stopped (their own progress counters), less the limit.
func BenchmarkGuardOvershoot(b *testing.B) {
	confine.SetForceGuard(b)
	base := varTmp(b)
	data := filepath.Join(base, "data")
	os.Mkdir(data, 0o700)
	l := newLauncher(b, confine.Options{DataDir: data, MemoryMax: memoryMax})
	for _, c := range []struct{ name, key, probe string }{
		{"alloc-1", "HOSTILE_MEMORY", "big=4096"},
		{"alloc-8", "HOSTILE_MEMORY", "spread=4096/8"},
		{"tmpfs", "HOSTILE_FILL", "tmp=/tmp:4096"},
	} {
		b.Run(c.name, func(b *testing.B) {
			var over, most int
			for b.Loop() {
				o := memoryRun(b, l, base, map[string]string{c.key: c.probe}, true)
				if !o.stopped() {
					b.Fatalf("not stopped: %s", o)
				}
				over += o.held - memoryMax>>20
				most = max(most, o.held-memoryMax>>20)
			}
			b.ReportMetric(float64(over)/float64(b.N), "MiB-over/op")
			b.ReportMetric(float64(most), "MiB-over-max")
		})
	}
}

// TestMemoryMaxTooSmall: a limit no agent can run under is refused at
// once, naming the option, rather than stop every agent at its start.
func TestMemoryMaxTooSmall(t *testing.T) {
	_, err := confine.New(confine.Options{MemoryMax: 1 << 20, DataDir: varTmp(t)})
	var bad *confine.OptionError
	if !errors.As(err, &bad) || bad.Field != "MemoryMax" || !strings.Contains(err.Error(), "64 MiB") {
		t.Fatalf("New with 1 MiB = %v, want an OptionError for MemoryMax", err)
	}
}
