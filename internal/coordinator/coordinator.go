// Package coordinator ties the pieces of Sparkles together: it creates
// sandboxes, boots one agent per sandbox, runs prompts as turns, routes
// approvals, and appends the curated events that translate produces to the
// Store. The HTTP layer talks to it; it talks to agent, translate and a Store.
package coordinator

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sparkles-dev/sparkles/internal/agent"
	"github.com/sparkles-dev/sparkles/internal/cluster"
	"github.com/sparkles-dev/sparkles/internal/registry"
	"github.com/sparkles-dev/sparkles/internal/workspace"
	"github.com/sparkles-dev/sparkles/sandbox"
	"github.com/sparkles-dev/sparkles/translate"
)

// Defaults of Config.
const (
	// DefaultAgentIdleTimeout is how long an agent may sit idle before it
	// is stopped.
	DefaultAgentIdleTimeout = 15 * time.Minute
	// DefaultMaxAgents is how many agents may run at once: a Node adapter
	// holds 150-300 MB, so 64 of them fill a machine of 16 to 32 GB.
	DefaultMaxAgents = 64
	// DefaultBootTimeout is how long an agent may take to start a session.
	DefaultBootTimeout = 30 * time.Second
	// DefaultTurnTimeout is how long one turn may run.
	DefaultTurnTimeout = 30 * time.Minute
	// DefaultApprovalTimeout and DefaultFlushInterval are the translator's,
	// to which the coordinator passes them.
	DefaultApprovalTimeout = translate.DefaultApprovalTTL
	DefaultFlushInterval   = translate.DefaultFlushInterval
)

// Config is what a Coordinator needs. Zero durations take the defaults.
type Config struct {
	Store   sandbox.Store
	DataDir string // sandbox working directories live under DataDir/sandboxes/<id>/work
	// Agents maps agent names to what starts them: command, arguments
	// and environment (the registry, docs/agents.md). With no agents at all,
	// sandboxes have no runtime and go straight to ready (the event log
	// alone, as embedded tests use it).
	Agents registry.Registry
	// Builtins are agents run in-process over pipes instead of as a process
	// (the demo agent inside an embedding program's tests). A name in both
	// maps runs as the builtin.
	Builtins     map[string]BuiltinAgent
	DefaultAgent string
	// Launcher, when set, starts every agent process confined to its
	// sandbox directory (internal/confine); builtins are not processes.
	Launcher agent.Launcher
	// FSBudget is the memory that the fs/read_text_file and
	// fs/write_text_file requests of all agents may hold at once (see
	// agent.FSBudget); 0 is agent.DefaultFSBudget.
	FSBudget int64

	BootTimeout     time.Duration // 0: DefaultBootTimeout
	TurnTimeout     time.Duration // 0: DefaultTurnTimeout
	ApprovalTimeout time.Duration // 0: DefaultApprovalTimeout
	FlushInterval   time.Duration // 0: DefaultFlushInterval
	// StoreRetry is the first wait before a write the store refused is
	// tried again (default 100ms); each refusal doubles it up to
	// StoreRetryMax (default 5s). See health.go.
	StoreRetry    time.Duration
	StoreRetryMax time.Duration

	// Redact, when set, returns values of the server's own to redact
	// from every string of a sandbox as its secrets are (the server token
	// and the sandbox's stream token), and from the metadata it is
	// created with.
	Redact func(sandboxID string) []string
	// AgentIdleTimeout stops an agent that has had no turn this long; the
	// next turn boots it again (default 15m; negative: never).
	AgentIdleTimeout time.Duration
	// MaxAgents bounds the agents running at once on this coordinator
	// (default 64). When every slot is held, a turn that needs an agent
	// stops the least recently used idle one or waits for a slot.
	MaxAgents int
	// SandboxDiskMax bounds the bytes of one sandbox's work, home and tmp
	// directories, and DiskReserve is free space under DataDir that agents
	// never get (see disk.go); zero is no limit.
	SandboxDiskMax int64
	DiskReserve    int64
	// LogMaxBytes bounds the bytes a sandbox's event log holds
	// (--retention-max-bytes): a turn whose own events outgrow it is
	// stopped and fails with log_full, and LogOver, when set, is told of
	// a log past it so that retention prunes its finished turns at once
	// (logbytes.go). Zero is no bound.
	LogMaxBytes int64
	LogOver     func(sandboxID string)
	// FileLimits bound what one write or one archive upload may put in a
	// workspace through Files (--files-max-size, --archive-max-size,
	// --archive-max-entries); zero fields take workspace's defaults.
	FileLimits workspace.Limits
	// TurnImageMax bounds the decoded bytes of one image or file of a
	// turn's input (--turn-image-max-size); 0 is sandbox.DefaultTurnImageMax.
	TurnImageMax int64

	Logger   *slog.Logger
	Now      func() time.Time
	Observer Observer // metrics; nil observes nothing

	// Cluster, when set, shares the store with other coordinators: each
	// sandbox's agent runs on the node holding its lease, and calls posted
	// to another node are forwarded there (the leased placement,
	// cluster.go). Nil runs every sandbox here, as the only coordinator of
	// its store (local). A coordinator without agents ignores it.
	Cluster cluster.Cluster
}

// Observer is told what the coordinator does, for metrics.
type Observer interface {
	TurnCompleted(status string)
	ApprovalResolved(decision string)
	UpdatesDropped(kind string, n int)
	Redacted(n int)
	AgentsRunning(delta int)
	// StoreHealthy says whether the store takes writes again (true) or
	// has begun to refuse them (false); it is told on each change.
	StoreHealthy(ok bool)
	// AppendFailed counts a write the store refused, each retry included;
	// AppendRetried counts each retry of a write that waits.
	AppendFailed()
	AppendRetried()
	// EventsWaiting moves the count of events held in memory until the
	// store takes them.
	EventsWaiting(delta int)
}

// NopObserver observes nothing; embed it to observe only some things.
type NopObserver struct{}

func (NopObserver) TurnCompleted(string)       {}
func (NopObserver) ApprovalResolved(string)    {}
func (NopObserver) UpdatesDropped(string, int) {}
func (NopObserver) Redacted(int)               {}
func (NopObserver) AgentsRunning(int)          {}
func (NopObserver) StoreHealthy(bool)          {}
func (NopObserver) AppendFailed()              {}
func (NopObserver) AppendRetried()             {}
func (NopObserver) EventsWaiting(int)          {}

// BuiltinAgent is an ACP agent that runs in-process: it reads requests from
// stdin and writes to stdout until ctx ends or stdin closes. env is the
// environment the agent would have had as a process.
type BuiltinAgent func(ctx context.Context, stdin io.Reader, stdout io.Writer, env []string) error

// Coordinator runs sandboxes. Its methods are safe for concurrent use.
type Coordinator struct {
	cfg   Config
	store sandbox.Store
	log   *slog.Logger

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu    sync.Mutex
	boxes map[string]*box
	slots *slots

	fsBudget *agent.FSBudget // shared by every agent started here

	health  storeHealth
	stalled atomic.Int64 // boxes with writes waiting for the store
	disk    diskGuard    // what the disk guard knows (disk.go)
	clones  cloneSet     // workspaces being cloned (source.go)

	// Chosen once, in New: whether sandboxes have agent runtimes, and on
	// which node each one runs (see placement.go).
	runtimes runtimes
	place    placement
}

// config is the private part of a sandbox kept in the store: never answered.
type config struct {
	Env     map[string]string `json:"env,omitempty"`
	Secrets map[string]string `json:"secrets,omitempty"`
	// MCPServers hold secret values too: their env and headers.
	MCPServers []sandbox.MCPServerConfig `json:"mcp_servers,omitempty"`
	// ToolOutput asks the agent for its commands' output (tool.output).
	ToolOutput bool `json:"tool_output,omitempty"`
}

// Limits on create requests, so one request cannot make a huge record.
const (
	maxMapEntries = 64
	maxKeyLen     = 256
	maxValueLen   = 16 << 10
)

// New returns a Coordinator over cfg.Store.
func New(cfg Config) (*Coordinator, error) {
	if cfg.Store == nil {
		return nil, fmt.Errorf("coordinator: no store")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Observer == nil {
		cfg.Observer = NopObserver{}
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&cfg.BootTimeout, DefaultBootTimeout)
	def(&cfg.TurnTimeout, DefaultTurnTimeout)
	def(&cfg.ApprovalTimeout, DefaultApprovalTimeout)
	def(&cfg.FlushInterval, DefaultFlushInterval)
	if cfg.AgentIdleTimeout == 0 {
		cfg.AgentIdleTimeout = DefaultAgentIdleTimeout
	}
	if cfg.MaxAgents <= 0 {
		cfg.MaxAgents = DefaultMaxAgents
	}
	def(&cfg.StoreRetry, 100*time.Millisecond)
	def(&cfg.StoreRetryMax, 5*time.Second)
	cfg.StoreRetryMax = max(cfg.StoreRetryMax, cfg.StoreRetry)
	if cfg.DefaultAgent == "" {
		if names := agentNames(cfg); len(names) > 0 {
			cfg.DefaultAgent = names[0]
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	c := &Coordinator{cfg: cfg, store: cfg.Store, log: cfg.Logger, ctx: ctx, cancel: cancel, boxes: map[string]*box{}, slots: newSlots(cfg.MaxAgents)}
	c.fsBudget = agent.NewFSBudget(cfg.FSBudget)
	// Chosen once (placement.go): whether sandboxes have runtimes, and on
	// which node each one runs. Without agents there are no runtimes to
	// place, so no node owns anything, cluster or not.
	c.runtimes, c.place = noRuntimes{c}, local{c}
	if hasAgents(cfg) {
		c.runtimes = agentRuntimes{c}
		c.startDiskGuard()
		if cfg.Cluster != nil {
			if err := startLeased(c, cfg.Cluster); err != nil {
				cancel()
				return nil, err
			}
		}
	}
	return c, nil
}

// now is the coordinator clock in UTC at the millisecond precision of the contract.
func (c *Coordinator) now() time.Time { return c.cfg.Now().UTC().Truncate(time.Millisecond) }

// agentNames lists every agent a sandbox may ask for, sorted.
func agentNames(cfg Config) []string {
	names := slices.Collect(maps.Keys(cfg.Agents))
	for n := range cfg.Builtins {
		if _, ok := cfg.Agents[n]; !ok {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	return names
}

func checkMap(field string, m map[string]string) error {
	if len(m) > maxMapEntries {
		return sandbox.Errorf(sandbox.EInvalidRequest, "%s has %d entries; at most %d are allowed", field, len(m), maxMapEntries)
	}
	for k, v := range m {
		if k == "" || len(k) > maxKeyLen {
			return sandbox.Errorf(sandbox.EInvalidRequest, "%s keys must be 1 to %d bytes", field, maxKeyLen)
		}
		if len(v) > maxValueLen {
			return sandbox.Errorf(sandbox.EInvalidRequest, "%s[%q] is longer than %d bytes", field, k, maxValueLen)
		}
	}
	return nil
}

// CreateSandbox stores a new sandbox and boots its agent in the background.
func (c *Coordinator) CreateSandbox(ctx context.Context, p sandbox.CreateParams) (sandbox.Sandbox, error) {
	for _, f := range []struct {
		name string
		m    map[string]string
	}{{"env", p.Env}, {"secrets", p.Secrets}, {"metadata", p.Metadata}} {
		if err := checkMap(f.name, f.m); err != nil {
			return sandbox.Sandbox{}, err
		}
	}
	for _, err := range []error{checkEnv("env", p.Env), checkEnv("secrets", p.Secrets), checkNoNUL("metadata", p.Metadata)} {
		if err != nil {
			return sandbox.Sandbox{}, err
		}
	}
	agentName, status, err := c.runtimes.agent(p.Agent)
	if err != nil {
		return sandbox.Sandbox{}, err
	}
	if err := c.checkSource(p.Source); err != nil {
		return sandbox.Sandbox{}, err
	}
	if err := c.checkMCPServers(agentName, p.MCPServers); err != nil {
		return sandbox.Sandbox{}, err
	}
	now := c.now()
	id := sandbox.NewID(sandbox.PrefixSandbox)
	sb := sandbox.Sandbox{
		ID:        id,
		Object:    "sandbox",
		Status:    status,
		Agent:     agentName,
		CreatedAt: now,
		UpdatedAt: now,
		Metadata:  c.redactMetadata(id, p.Metadata, withMCPSecrets(p.Secrets, p.MCPServers)),
		Source:    p.Source.Clone(),
	}
	sb.ToolOutput = p.ToolOutput
	sb.MCPServers = c.publicMCPServers(id, p.MCPServers, p.Secrets)
	if p.Config != nil && (p.Config.Mode != "" || p.Config.Model != "") {
		if err := checkConfigChange(*p.Config); err != nil {
			return sandbox.Sandbox{}, err
		}
		sb.Config = &sandbox.AgentConfig{Mode: p.Config.Mode, Model: p.Config.Model, Modes: []sandbox.ConfigChoice{}, Models: []sandbox.ConfigChoice{}}
	}
	if sb.Metadata == nil {
		sb.Metadata = map[string]string{}
	}
	cfgJSON, err := json.Marshal(config{Env: p.Env, Secrets: p.Secrets, MCPServers: p.MCPServers, ToolOutput: p.ToolOutput})
	if err != nil {
		return sandbox.Sandbox{}, err
	}
	// After the checks: a request that can never succeed says so, outage or not.
	if err := c.Writable(); err != nil {
		return sandbox.Sandbox{}, err
	}
	epoch, err := c.place.claimNew(ctx, sb.ID)
	if err != nil {
		return sandbox.Sandbox{}, err
	}
	err = c.store.Create(ctx, sb, cfgJSON)
	c.noteWrite("", err)
	if err != nil {
		_ = c.place.release(context.WithoutCancel(ctx), sb.ID)
		if storeFault(err) {
			return sandbox.Sandbox{}, unavailable(err)
		}
		return sandbox.Sandbox{}, err
	}
	if err := c.runtimes.start(ctx, sb.ID, epoch); err != nil {
		return sandbox.Sandbox{}, err
	}
	return c.store.Sandbox(ctx, sb.ID)
}

// AppendEvents appends curated events to a sandbox's log. The agent runtime
// appends through the same path; it is exported for embedding and tests.
func (c *Coordinator) AppendEvents(ctx context.Context, id string, events ...*sandbox.Event) error {
	now := c.now()
	for _, ev := range events {
		if !ev.Type.Durable() {
			return sandbox.Errorf(sandbox.EInvalidRequest, "%s events are not durable", ev.Type)
		}
		if ev.TS.IsZero() {
			ev.TS = now
		}
		ev.SandboxID = id
	}
	err := c.store.Append(ctx, id, events, nil)
	c.noteWrite(id, err)
	if storeFault(err) {
		return unavailable(err)
	}
	return err
}

// Close stops every sandbox runtime: running turns are completed as
// canceled and agents are stopped. The store stays open; its owner closes it,
// as does the owner of a Cluster (which then lets go of this node's leases).
func (c *Coordinator) Close() error {
	c.place.stop()
	c.cancel()
	c.wg.Wait()
	return nil
}

// Agents lists the agents sandboxes may ask for, sorted by name. A
// builtin runs in this process and is always available; a command is
// looked up now, so that an adapter installed after start shows up.
func (c *Coordinator) Agents(ctx context.Context) ([]sandbox.Agent, error) {
	names := agentNames(c.cfg)
	out := make([]sandbox.Agent, 0, len(names))
	for _, n := range names {
		_, builtin := c.cfg.Builtins[n]
		out = append(out, sandbox.Agent{Name: n, Available: builtin || c.cfg.Agents[n].Available()})
	}
	return out, nil
}
