// Package bench measures a Sparkles server end to end on the machine it runs
// on: durable appends, append-to-SSE latency, fan-out, idle connections,
// replay, slow readers, stopped agents, starts on a large store, the file's
// size, a long turn's cost, webhook deliveries, and the same side by side
// with a Mercure hub (peer, opt-in); and, with no server, what a turn costs
// its workspace. Each scenario starts its own server (the internal/app Main
// that serve runs, on a temporary data dir, the HTTP server on 127.0.0.1:0),
// in this process or, where the server's memory or CPU is measured apart
// from the clients', in a child process (RunChild), with agents only where
// it measures them (EnvChildAgent). It drives the server with a loopback
// client and reports figures with the conditions they were measured under
// and the target each is held to. `sparkles bench` prints them; the
// package's tests run every scenario that runs by default at tiny sizes so
// none of them can rot.
package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// Config chooses what to run and where.
type Config struct {
	// Scenarios are the names to run, in any order; empty runs them all
	// but the opt-in ones (peer).
	Scenarios []string
	// Short runs every scenario at tiny sizes: it checks that each works,
	// and its figures mean little.
	Short bool
	// Dir holds the scenarios' store files (default os.TempDir()). Put it
	// on the disk to be measured.
	Dir string
	// ChildCommand starts this program as the server of the idle and stall
	// scenarios: it must call RunChild when EnvChild is set (sparkles runs
	// `sparkles bench`; a test binary runs itself).
	ChildCommand []string
	// ServeCommand, when set, starts `sparkles serve` (flags are added),
	// which the coldstart scenario times; without it, it times the child
	// server.
	ServeCommand []string
	// Log receives progress lines and the servers' errors; nil discards.
	Log io.Writer
	// AgentCommand runs the demo agent as a process in the agents
	// scenario (`sparkles agent demo`); empty runs it in the server's
	// process, which leaves the process start out of the boot.
	AgentCommand []string
	// ProfileDir, when set, receives a CPU profile of each scenario
	// (NAME.cpu.pprof: client and server together where they share the
	// process) and the child server's heap and goroutine profiles at the
	// moment its memory is measured (NAME-server.heap.pprof, ...).
	ProfileDir string
	// PeerMercure is the path of the mercure-peer binary
	// (internal/bench/mercure), which the peer scenario measures Sparkles
	// against; without it that scenario cannot run.
	PeerMercure string
	// MercureHub is the path of the Mercure hub as shipped (Caddy with
	// the Mercure module, internal/bench/mercurehub): when set, the peer
	// scenario's cold start is also timed against it.
	MercureHub string
}

// Figure is one measured value.
type Figure struct {
	Scenario   string  `json:"scenario"`
	Name       string  `json:"name"`
	Value      float64 `json:"value"`
	Unit       string  `json:"unit"`
	Conditions string  `json:"conditions"`
	// Target is what the value is held to, as text; empty when none.
	Target string `json:"target,omitempty"`
	// Met tells whether Value meets Target; nil when there is no target.
	Met *bool `json:"met,omitempty"`
}

// Report is the result of a run.
type Report struct {
	Date    time.Time `json:"date"`
	Machine Machine   `json:"machine"`
	Short   bool      `json:"short"`
	// Note says how client and server share the machine.
	Note    string    `json:"note"`
	Figures []Figure  `json:"figures"`
	Runs    []RunInfo `json:"runs"`
}

// RunInfo says how one scenario ran. The load average at its start tells
// whether something else was using the machine's CPUs.
type RunInfo struct {
	Scenario string  `json:"scenario"`
	Seconds  float64 `json:"seconds"`
	Load1    float64 `json:"load1"` // 1-minute load average at the start, -1 if unknown
}

// Machine is what the figures were measured on.
type Machine struct {
	CPU        string `json:"cpu"`
	NumCPU     int    `json:"num_cpu"`
	GOMAXPROCS int    `json:"gomaxprocs"`
	Go         string `json:"go"`
	OS         string `json:"os"`
	Dir        string `json:"dir"`
}

// scenario is one named measurement.
type scenario struct {
	name  string
	about string
	run   func(ctx context.Context, r *runner) error
	// limit bounds the whole scenario, so a run always ends by itself.
	limit time.Duration
}

// optIn names the scenarios that run only when named: they need what a
// machine may not have (peer: a build of Mercure).
var optIn = map[string]bool{"peer": true, "peer-store": true}

// untargeted names the scenarios that hold no figure to a target: they
// measure the machine, not the server (floor: what of latency's and
// fanout's p99 the machine itself takes).
var untargeted = map[string]bool{"floor": true}

var scenarios = []scenario{
	{"append", "durable appends/s through coordinator.AppendEvents with 1, 16, 256 concurrent sandboxes", runAppend, 5 * time.Minute},
	{"latency", "append-to-SSE delivery latency, idle and at 10,000 events/s", runLatency, 5 * time.Minute},
	{"fanout", "one sandbox, 1,000 SSE subscribers: deliveries/s and latency", runFanout, 5 * time.Minute},
	{"floor", "latency's and fanout's child-process loads against a bare SSE writer: what the machine takes of their p99", runFloor, 5 * time.Minute},
	{"idle", "10,000 idle SSE connections: server memory per connection", runIdle, 5 * time.Minute},
	{"replay", "replay of a 100,000-event log over SSE and JSON pages", runReplay, 10 * time.Minute},
	{"stall", "a reader that never reads while others stream: server memory growth", runStall, 5 * time.Minute},
	{"stall-snapshot", "300 readers that never read a 5 MB snapshot: server memory per connection", runStallSnapshot, 5 * time.Minute},
	{"agents", "1,000 sandboxes whose idle agents stopped: server memory per sandbox; a turn on a stopped sandbox to its first event", runAgents, 10 * time.Minute},
	{"coldstart", "start of a server on 2,000 sandboxes x 1,000 events (1.3 GB), page cache dropped: time to /healthz, RSS", runColdStart, 20 * time.Minute},
	{"crashstart", "start of a server on 2,000 sandboxes x 1,000 events (1.3 GB) that a kill -9 left: time to /healthz, RSS", runCrashStart, 20 * time.Minute},
	{"size", "the store file against what it holds: 100,000 events in one sandbox, then a prune of half and as many appends", runSize, 10 * time.Minute},
	{"turncost", "one agent announcing a new tool call per update: the server's CPU per event at the turn's 100,000th tool call against its 100th", runTurnCost, 10 * time.Minute},
	{"workspace", "a 10,000-file, 200 MiB workspace: a turn boundary with 10 files changed, its change list and diff, the tar.gz of the tree", runWorkspace, 5 * time.Minute},
	{"webhooks", "one webhook endpoint for every durable event, a loopback receiver answering 204: commit-to-delivery delay at a steady rate, deliveries/s while agents flood and while their backlog drains", runWebhooks, 5 * time.Minute},
	{"peer", "Sparkles and Mercure side by side (needs --peer-mercure): durable events/s (agents cycling 16 tool calls, and a new tool call per update), fan-out, idle connections, replay, file size, cold start", runPeer, 30 * time.Minute},
	{"peer-store", "peer's parts on a store of 100,000 events alone (needs --peer-mercure): replay, file size, cold start", runPeerStore, 10 * time.Minute},
}

// Names lists the scenarios in the order they run.
func Names() []string {
	names := make([]string, len(scenarios))
	for i, s := range scenarios {
		names[i] = s.name
	}
	return names
}

// runner is what a scenario measures with.
type runner struct {
	cfg     Config
	name    string
	figures []Figure
}

// pick returns full or, in short mode, short.
func pick[T any](r *runner, full, short T) T {
	if r.cfg.Short {
		return short
	}
	return full
}

func (r *runner) add(f Figure) {
	f.Scenario = r.name
	r.figures = append(r.figures, f)
}

func (r *runner) logf(format string, args ...any) {
	if r.cfg.Log != nil {
		fmt.Fprintf(r.cfg.Log, "bench %s: %s\n", r.name, fmt.Sprintf(format, args...))
	}
}

// tempDir makes a directory for one server's files under cfg.Dir.
func (r *runner) tempDir() (dir string, cleanup func(), err error) {
	dir, err = os.MkdirTemp(r.cfg.Dir, "sparkles-bench-"+r.name+"-")
	if err != nil {
		return "", nil, err
	}
	return dir, func() { os.RemoveAll(dir) }, nil
}

// local starts an in-process server on a fresh directory; stop closes it
// and removes the directory.
func (r *runner) local() (l *local, stop func(), err error) {
	dir, cleanup, err := r.tempDir()
	if err != nil {
		return nil, nil, err
	}
	if l, err = startLocal(dir, newLogger(r.cfg.Log), nil); err != nil {
		cleanup()
		return nil, nil, err
	}
	return l, func() { l.close(); cleanup() }, nil
}

// child starts a child server on a fresh directory (see startChild); stop
// closes it and removes the directory.
func (r *runner) child(ctx context.Context, env ...string) (c *child, stop func(), err error) {
	dir, cleanup, err := r.tempDir()
	if err != nil {
		return nil, nil, err
	}
	if c, err = r.startChild(ctx, dir, env...); err != nil {
		cleanup()
		return nil, nil, err
	}
	return c, func() { c.close(); cleanup() }, nil
}

// startCPUProfile profiles this process into ProfileDir, if set, until
// the returned function is called.
func (r *runner) startCPUProfile() (stop func() error, err error) {
	if r.cfg.ProfileDir == "" {
		return func() error { return nil }, nil
	}
	f, err := os.Create(filepath.Join(r.cfg.ProfileDir, r.name+".cpu.pprof"))
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() error {
		pprof.StopCPUProfile()
		return f.Close()
	}, nil
}

// startChild starts a child server for this scenario and, if ProfileDir is
// set, profiles its CPU into NAME-server.cpu.pprof until it is closed.
func (r *runner) startChild(ctx context.Context, dir string, env ...string) (*child, error) {
	c, err := startChild(ctx, r.cfg.ChildCommand, dir, env...)
	if err != nil || r.cfg.ProfileDir == "" {
		return c, err
	}
	path, err := filepath.Abs(filepath.Join(r.cfg.ProfileDir, r.name+"-server.cpu.pprof"))
	if err == nil {
		_, err = c.do(ctx, childRequest{Op: "cpu", Path: path})
	}
	if err != nil {
		c.close()
		return nil, err
	}
	return c, nil
}

// serverProfile asks a child server for its heap and goroutine profiles,
// if ProfileDir is set.
func (r *runner) serverProfile(ctx context.Context, c *child) error {
	if r.cfg.ProfileDir == "" {
		return nil
	}
	dir, err := filepath.Abs(r.cfg.ProfileDir)
	if err != nil {
		return err
	}
	_, err = c.do(ctx, childRequest{Op: "profile", Path: filepath.Join(dir, r.name+"-server")})
	return err
}

// Run runs the chosen scenarios one after the other and reports their
// figures. A scenario that fails ends the run with its error, and the
// figures measured so far.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if cfg.Dir == "" {
		cfg.Dir = os.TempDir()
	}
	for _, name := range cfg.Scenarios {
		if !slices.Contains(Names(), name) {
			return nil, fmt.Errorf("unknown scenario %q; there are: %s", name, strings.Join(Names(), ", "))
		}
	}
	rep := &Report{
		Date:    time.Now().UTC().Truncate(time.Second),
		Machine: machine(cfg.Dir),
		Short:   cfg.Short,
	}
	rep.Note = fmt.Sprintf("client and server share this machine's %d CPUs (GOMAXPROCS=%d): append, latency, fanout and replay "+
		"run both in one process; idle, stall, stall-snapshot and the second half of fanout run the server as a child process, and floor a bare SSE writer "+
		"(memory read from its /proc status); peer runs Sparkles and Mercure each as a child process",
		rep.Machine.NumCPU, rep.Machine.GOMAXPROCS)
	for _, s := range scenarios {
		if len(cfg.Scenarios) > 0 && !slices.Contains(cfg.Scenarios, s.name) || len(cfg.Scenarios) == 0 && optIn[s.name] {
			continue
		}
		r := &runner{cfg: cfg, name: s.name}
		r.logf("%s", s.about)
		stopProfile, err := r.startCPUProfile()
		if err != nil {
			return rep, err
		}
		sctx, cancel := context.WithTimeout(ctx, s.limit)
		load := loadAverage()
		start := time.Now()
		err = s.run(sctx, r)
		cancel()
		if perr := stopProfile(); err == nil {
			err = perr
		}
		rep.Figures = append(rep.Figures, r.figures...)
		rep.Runs = append(rep.Runs, RunInfo{Scenario: s.name, Seconds: time.Since(start).Seconds(), Load1: load})
		if err != nil {
			return rep, fmt.Errorf("scenario %s: %w", s.name, err)
		}
		r.logf("done in %s", time.Since(start).Round(time.Millisecond))
	}
	return rep, nil
}

func machine(dir string) Machine {
	return Machine{
		CPU:        cpuModel(),
		NumCPU:     runtime.NumCPU(),
		GOMAXPROCS: runtime.GOMAXPROCS(0),
		Go:         runtime.Version(),
		OS:         runtime.GOOS + "/" + runtime.GOARCH,
		Dir:        dir,
	}
}

// loadAverage is the 1-minute load average, -1 where there is none.
func loadAverage() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return -1
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return -1
	}
	v, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return -1
	}
	return v
}

func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return "unknown"
	}
	for line := range strings.Lines(string(b)) {
		if name, value, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(name) == "model name" {
			return strings.TrimSpace(value)
		}
	}
	return "unknown"
}

// WriteJSON writes the report as one indented JSON document.
func (rep *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(rep)
}

// WriteTable writes the report as a table for people.
func (rep *Report) WriteTable(w io.Writer) error {
	m := rep.Machine
	fmt.Fprintf(w, "sparkles bench, %s, %s, %s\n", rep.Date.Format(time.RFC3339), m.OS, m.Go)
	fmt.Fprintf(w, "machine: %s, %d CPUs; store files in %s\n", m.CPU, m.NumCPU, m.Dir)
	fmt.Fprintf(w, "note: %s\n", rep.Note)
	if rep.Short {
		fmt.Fprintln(w, "note: --short: tiny sizes that check each scenario runs; the figures are not meaningful")
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SCENARIO\tFIGURE\tVALUE\tTARGET\tMET\tCONDITIONS")
	for _, f := range rep.Figures {
		met := ""
		if f.Met != nil {
			met = "no"
			if *f.Met {
				met = "yes"
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", f.Scenario, f.Name, formatValue(f.Value, f.Unit), f.Target, met, f.Conditions)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	for _, run := range rep.Runs {
		load := "unknown"
		if run.Load1 >= 0 {
			load = fmt.Sprintf("%.2f", run.Load1)
		}
		fmt.Fprintf(w, "ran %s in %.0fs; load average at its start: %s (%d CPUs)\n", run.Scenario, run.Seconds, load, m.NumCPU)
	}
	return nil
}

// formatValue prints a value with its unit, at a precision that suits it.
func formatValue(v float64, unit string) string {
	return strings.TrimSpace(formatNumber(v, unit) + " " + unit)
}

func formatNumber(v float64, unit string) string {
	switch unit {
	case "ms":
		return fmt.Sprintf("%.2f", v)
	case "KiB", "MiB":
		return fmt.Sprintf("%.1f", v)
	}
	switch {
	case v >= 100:
		return thousands(int64(v + 0.5))
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.2f", v)
}

// thousands writes n with a comma every three digits.
func thousands(n int64) string {
	if n < 0 {
		return "-" + thousands(-n)
	}
	s := fmt.Sprint(n)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// Target checks.

func atLeast(v, target float64) *bool { ok := v >= target; return &ok }
func below(v, target float64) *bool   { ok := v < target; return &ok }

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func perSecond(n int64, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(n) / d.Seconds()
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }

// sleepCtx waits for d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
