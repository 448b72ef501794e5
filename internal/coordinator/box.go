package coordinator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"slices"
	"time"

	"github.com/sparkles-dev/sparkles/internal/agent"
	"github.com/sparkles-dev/sparkles/internal/datadir"
	"github.com/sparkles-dev/sparkles/internal/registry"
	"github.com/sparkles-dev/sparkles/internal/snapshot"
	"github.com/sparkles-dev/sparkles/sandbox"
	"github.com/sparkles-dev/sparkles/translate"
)

// box is the runtime of one sandbox: an actor goroutine that owns the agent
// connection, the translator and the current turn. Everything that changes
// them runs on that goroutine, as a command or as an inbound agent message,
// so the order of events in the log is the order things happened.
//
// Its state is in parts with one job each, every one owned by the actor
// (none has a goroutine or a lock of its own; the loop in run selects on
// their timers and channels and calls into them):
//
//   - writes (pending.go): the appends the store refused, in order, their
//     health and the timer that retries them.
//   - slot (idle.go, slots.go): the agent slot the box holds or waits for,
//     the idle timer that stops an agent with nothing to do, and the
//     channels on which the slot manager grants a slot or asks for it back.
//   - timers (turn.go): the running turn's timeout, the grace of a cancel,
//     and the translator's next flush of coalesced chunks.
//   - approvals (approvals.go): the pending permission requests of the turn
//     and the timer that expires them.
//   - queue (queue.go): the turns accepted to start after the open one,
//     first come first.
//
// What is left on box itself is the agent (conn, boot, session), the
// translator and the current turn, which every part reads.
type box struct {
	c    *Coordinator
	id   string
	cmds chan func()

	// Owned by the actor goroutine.
	conn     *agent.Conn
	booting  bool
	bootDone chan bootResult
	tr       *translate.Translator
	seen     translate.Stats // translator counts already told to the observer
	cfg      config          // the sandbox's private config, read with the translator
	turn     *turnRun
	queue    []*turnRun // turns waiting behind turn (queue.go)
	deleted  bool
	logBytes logBytesWatch // the event log's byte bound (logbytes.go)

	// The agent's session (see session.go).
	session     string // the open session's id
	sessionKept bool   // it is the one the sandbox's state keeps

	writes    pendingWrites
	slot      agentSlot
	timers    turnTimers
	approvals approvals
}

type turnRun struct {
	turn     sandbox.Turn
	text     string
	start    snapshot.ID // the workspace when the prompt was sent (workspace.go)
	accepted bool        // answered 202: its turn.started and turn.completed must reach the log
	running  bool        // turn.started written (or waiting), prompt sent unless the store refused it
	canceled bool
	// prompt is the prompt of an input of blocks (attachments.go); nil for text.
	prompt []agent.Block
}

type bootResult struct {
	conn   *agent.Conn
	err    error
	stderr string // the end of what the agent wrote to stderr, when err is set
	// configErrs: the recorded mode or model the agent did not take (config.go).
	configErrs []error
}

func (c *Coordinator) box(id string) (*box, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if b, ok := c.boxes[id]; ok {
		return b, nil
	}
	if c.ctx.Err() != nil {
		return nil, sandbox.Errorf(sandbox.EConflict, "the server is shutting down")
	}
	b := &box{
		c:         c,
		id:        id,
		cmds:      make(chan func()),
		bootDone:  make(chan bootResult, 1),
		writes:    pendingWrites{retry: stoppedTimer()},
		slot:      newAgentSlot(),
		timers:    turnTimers{timeout: stoppedTimer(), cancel: stoppedTimer(), flush: stoppedTimer()},
		approvals: approvals{runs: map[string]*approvalRun{}, timer: stoppedTimer()},
	}
	c.boxes[id] = b
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		b.run(c.ctx)
	}()
	return b, nil
}

// current reports whether b is the coordinator's box of its sandbox: a
// box the leased placement retired is not.
func (c *Coordinator) current(b *box) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.boxes[b.id] == b
}

// existingBox returns the box of a sandbox if this node has one.
func (c *Coordinator) existingBox(id string) *box {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.boxes[id]
}

func stoppedTimer() *time.Timer {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return t
}

// do runs fn on the box's goroutine and waits for it.
func (b *box) do(ctx context.Context, fn func()) error {
	done := make(chan struct{})
	select {
	case b.cmds <- func() { defer close(done); fn() }:
	case <-ctx.Done():
		return ctx.Err()
	case <-b.c.ctx.Done():
		return sandbox.Errorf(sandbox.EConflict, "the server is shutting down")
	}
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		// The command still runs to its end on the box goroutine.
		<-done
		return nil
	}
}

func (b *box) run(ctx context.Context) {
	for {
		var inbox <-chan agent.Inbound
		if b.conn != nil {
			inbox = b.conn.Inbox()
		}
		select {
		case <-ctx.Done():
			b.shutdown()
			return
		case fn := <-b.cmds:
			fn()
		case in, ok := <-inbox:
			if ok && in.Kind == agent.Update {
				in, ok = b.updates(in, inbox)
			}
			switch {
			case !ok:
				b.agentGone(nil, false)
			case in.Kind != 0:
				b.inbound(in)
			}
		case res := <-b.bootDone:
			b.booted(res)
		case <-b.timers.flush.C:
			if b.tr != nil {
				b.emit(b.tr.Flush())
			}
		case <-b.timers.timeout.C:
			b.turnTimedOut()
		case <-b.timers.cancel.C:
			b.cancelOverdue()
		case <-b.approvals.timer.C:
			b.expireApprovals()
		case <-b.slot.idleTimer.C:
			b.idleExpired()
		case <-b.slot.granted:
			b.slotGranted()
		case <-b.slot.evict:
			b.evicted()
		case <-b.writes.retry.C:
			b.retryWrites()
		}
		b.stopForStore()
		b.stopForLogBytes()
		b.nextTurn()
		b.armFlush()
		b.settleIdle()
	}
}

// maxUpdateRun bounds how many waiting session updates one append takes,
// and maxUpdateBytes their raw bytes: a run of large tool calls is one
// append of about a MiB, which bounds how far a turn passes the event
// log's byte bound before it is stopped (logbytes.go).
const (
	maxUpdateRun   = 1024
	maxUpdateBytes = 1 << 20
)

// updates translates first and the session updates already waiting behind
// it, and appends their events in one write. An agent that sends faster than
// the disk syncs then costs one sync per run of updates, not one per chunk,
// and chunks that arrived while the last write synced coalesce as they
// should. It returns the first waiting value that is not an update (Kind 0
// when there is none) and ok false when the inbox closed.
func (b *box) updates(first agent.Inbound, inbox <-chan agent.Inbound) (next agent.Inbound, ok bool) {
	evs := b.tr.Update(first.Params)
	defer func() { b.emit(evs) }()
	size := len(first.Params)
	for range maxUpdateRun {
		if size >= maxUpdateBytes {
			break
		}
		select {
		case in, ok := <-inbox:
			if !ok || in.Kind != agent.Update {
				return in, ok
			}
			evs = append(evs, b.tr.Update(in.Params)...)
			size += len(in.Params)
		default:
			return agent.Inbound{}, true
		}
	}
	return agent.Inbound{}, true
}

func (b *box) log() *slog.Logger { return b.c.log.With("sandbox_id", b.id) }

func (b *box) dir() datadir.Sandbox { return datadir.Dir(b.c.cfg.DataDir).Sandbox(b.id) }

// emit appends events durably, after the writes that wait for the store,
// if any. A refused append waits in memory and is retried (see write); the
// error tells a caller that answers a request.
func (b *box) emit(evs []*sandbox.Event) error {
	b.keepUsage(evs)
	return b.write(evs, nil)
}

// keepUsage gives the running turn, which GET of the turn answers from,
// the usage of the turn.usage events among evs.
func (b *box) keepUsage(evs []*sandbox.Event) {
	if b.turn == nil {
		return
	}
	for _, ev := range evs {
		if u, ok := ev.Data.(*sandbox.TurnUsage); ok && ev.TurnID == b.turn.turn.ID {
			usage := u.Usage
			b.turn.turn.Usage = &usage
		}
	}
}

// observe tells the observer about settled turns and approvals, and, when a
// turn ends, what the translator dropped and redacted since last time.
func (b *box) observe(evs []*sandbox.Event) {
	obs := b.c.cfg.Observer
	turnDone := false
	for _, ev := range evs {
		switch d := ev.Data.(type) {
		case *sandbox.TurnCompleted:
			obs.TurnCompleted(d.Status)
			turnDone = true
		case *sandbox.ApprovalResolved:
			obs.ApprovalResolved(d.Decision)
		}
	}
	if !turnDone || b.tr == nil {
		return
	}
	st := b.tr.Stats()
	for kind, n := range st.Dropped {
		if d := n - b.seen.Dropped[kind]; d > 0 {
			obs.UpdatesDropped(kind, d)
		}
	}
	if d := st.Redactions - b.seen.Redactions; d > 0 {
		obs.Redacted(d)
	}
	b.seen = st
}

// setConn replaces the agent connection and keeps the running-agents gauge.
func (b *box) setConn(conn *agent.Conn) {
	switch {
	case b.conn == nil && conn != nil:
		b.c.cfg.Observer.AgentsRunning(1)
	case b.conn != nil && conn == nil:
		b.c.cfg.Observer.AgentsRunning(-1)
	}
	b.conn = conn
	b.c.disk.setRunning(b.id, conn != nil)
}

// setStatus appends evs and changes the sandbox's status in the same write,
// which waits like any other when the store refuses it.
func (b *box) setStatus(status, detail string, evs ...*sandbox.Event) error {
	return b.write(evs, b.statusMutate(status, detail))
}

// statusMutate sets the sandbox's status, unless it is deleted already. It
// reads the clock when the write is made, a retry included.
func (b *box) statusMutate(status, detail string) func(*sandbox.State) error {
	return func(st *sandbox.State) error {
		if st.Sandbox.Status == sandbox.StatusDeleted && status != sandbox.StatusDeleted {
			return nil
		}
		st.Sandbox.Status, st.Sandbox.StatusDetail = status, detail
		st.Sandbox.UpdatedAt = b.c.now()
		return nil
	}
}

func (b *box) armFlush() {
	b.timers.flush.Stop()
	if b.tr == nil {
		return
	}
	if at, ok := b.tr.NextFlush(); ok {
		b.timers.flush.Reset(max(time.Until(at), 0))
	}
}

// translator returns the sandbox's translator, built from its private config.
// The private config never changes after create, so it is read once.
func (b *box) translator() (*translate.Translator, config, error) {
	if b.tr != nil {
		return b.tr, b.cfg, nil
	}
	var cfg config
	raw, err := b.c.store.Config(context.Background(), b.id)
	if err != nil {
		return nil, cfg, err
	}
	if err := json.Unmarshal(raw, &cfg); err != nil {
		return nil, cfg, fmt.Errorf("decode sandbox config: %w", err)
	}
	b.cfg = cfg
	secrets := b.c.redactions(b.id, cfg.secrets())
	b.tr = translate.New(translate.Config{
		SandboxID:     b.id,
		Dir:           b.dir().Work(),
		DataDir:       b.c.cfg.DataDir,
		Secrets:       secrets,
		FlushInterval: b.c.cfg.FlushInterval,
		ApprovalTTL:   b.c.cfg.ApprovalTimeout,
		Now:           b.c.cfg.Now,
		ToolOutput:    cfg.ToolOutput,
	})
	return b.tr, cfg, nil
}

// boot starts the agent in the background; the result arrives on bootDone.
// forTurn tells whether a turn waits for the agent: then a boot that finds
// every agent slot held waits in the queue for one; a boot at create (only
// warming the agent up) takes a free slot or leaves the agent for the first
// turn. The state read here holds the agent's session from its last boot.
func (b *box) boot(forTurn bool) {
	if b.conn != nil || b.booting || b.deleted {
		return
	}
	st, err := b.c.store.State(context.Background(), b.id)
	if err != nil {
		b.log().Error("boot: read sandbox", "err", err)
		return
	}
	sb := st.Sandbox
	_, cfg, err := b.translator()
	if err != nil {
		b.log().Error("boot: read config", "err", err)
		b.setStatus(sandbox.StatusFailed, "the sandbox configuration could not be read")
		return
	}
	wish := b.configAtBoot(st)
	reg, registered := b.c.cfg.Agents[sb.Agent]
	var command []string
	if registered {
		command = reg.Argv()
	}
	builtin := b.c.cfg.Builtins[sb.Agent]
	if len(command) == 0 && builtin == nil {
		msg := fmt.Sprintf("agent %q is not registered on this server", sb.Agent)
		b.setStatus(sandbox.StatusFailed, msg, b.tr.Error(sandbox.ErrAgentStartFailed, msg)...)
		b.failQueued(sandbox.ErrAgentStartFailed, msg)
		return
	}
	if !b.slot.held {
		if !b.c.slots.acquire(b, forTurn) {
			if forTurn {
				b.waitForSlot()
			} else {
				b.setStatus(sandbox.StatusStopped, fmt.Sprintf("the agent starts with the first turn: all %d agent slots are in use", b.c.cfg.MaxAgents))
			}
			return
		}
		b.slot.held, b.slot.waiting = true, false
	}
	b.booting = true
	b.setStatus(sandbox.StatusBooting, fmt.Sprintf("starting agent %q", sb.Agent))
	work := b.dir().Work()
	acfg := agent.Config{
		Command: command,
		Run:     builtin,
		Dir:     work,
		Env:     agentEnv(reg, cfg),
		Confinement: agent.Confinement{
			Network: reg.Network, ReadPaths: reg.ReadPaths, WritePaths: reg.WritePaths, HostPorts: reg.HostPorts,
		},
		Logger: b.log(),

		Launcher: b.c.cfg.Launcher,
		Sandbox:  string(b.dir()),
		Session:  st.AgentSession,
		FSBudget: b.c.fsBudget,

		MCPServers: cfg.agentMCPServers(),
	}
	acfg.ToolOutput = cfg.ToolOutput
	timeout := b.c.cfg.BootTimeout
	go func() {
		res := bootResult{}
		defer func() { b.bootDone <- res }()
		if err := os.MkdirAll(work, 0o700); err != nil {
			res.err = errors.New("the sandbox directory could not be created")
			return
		}
		if res.err = b.cloneSource(sb.Source, reg, cfg, work); res.err != nil {
			return
		}
		logf, err := openAgentLog(b.dir().AgentLog(), agentLogMax)
		if err == nil {
			acfg.Stderr = logf
		}
		ctx, cancel := context.WithTimeout(b.c.ctx, timeout)
		defer cancel()
		res.conn, res.err = agent.Start(ctx, acfg)
		if res.err == nil {
			res.configErrs = applyConfig(ctx, res.conn, wish)
		}
		if logf != nil {
			if res.err != nil {
				res.stderr = logf.Tail()
				logf.Close()
			} else {
				go func() { <-res.conn.Done(); logf.Close() }()
			}
		}
		if res.err != nil && ctx.Err() == context.DeadlineExceeded {
			res.err = fmt.Errorf("the agent did not start a session within %s", timeout)
		}
	}()
}

// agentEnv is the whole environment of an agent: a minimal base from the
// server's own (PATH, HOME, LANG), then the registry's env and pass_env,
// then the sandbox's env, then its secrets; each later one wins over the
// earlier (docs/agents.md). Nothing else of the server's environment, such as its
// token, reaches the agent.
func agentEnv(reg registry.Agent, cfg config) []string {
	env := map[string]string{}
	for _, k := range []string{"PATH", "HOME", "LANG"} {
		if v, ok := os.LookupEnv(k); ok {
			env[k] = v
		}
	}
	for _, m := range []map[string]string{reg.Environ(os.LookupEnv), cfg.Env, cfg.Secrets} {
		maps.Copy(env, m)
	}
	out := make([]string, 0, len(env))
	for _, k := range slices.Sorted(maps.Keys(env)) {
		out = append(out, k+"="+env[k])
	}
	return out
}

func (b *box) booted(res bootResult) {
	b.booting = false
	if res.err != nil {
		if b.deleted {
			b.releaseSlot()
			b.removeFiles() // what a clone the delete stopped wrote meanwhile
			return
		}
		if src, ok := errors.AsType[*sourceFailure](res.err); ok {
			msg := b.sanitize(src.msg, maxStatusDetail)
			b.releaseSlot()
			b.setStatus(sandbox.StatusFailed, msg, b.tr.Error(sandbox.ErrSourceFailed, msg)...)
			b.failQueued(sandbox.ErrSourceFailed, msg)
			return
		}
		msg := b.bootFailure(res)
		b.releaseSlot()
		b.setStatus(sandbox.StatusFailed, msg, b.tr.Error(sandbox.ErrAgentStartFailed, msg)...)
		b.failQueued(sandbox.ErrAgentStartFailed, msg)
		return
	}
	if b.deleted || b.c.ctx.Err() != nil {
		res.conn.Close()
		b.releaseSlot()
		if b.deleted {
			b.removeFiles() // what it wrote while it booted after the delete
		}
		return
	}
	b.setConn(res.conn)
	detail, evs := b.resumed(res.conn)
	cfg, cfgEvs := b.configBooted(res)
	b.write(append(evs, cfgEvs...), b.readyMutate(detail, cfg))
	if b.turn != nil && !b.turn.running {
		b.runTurn()
	}
}
