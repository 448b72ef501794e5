package coordinator

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/sparkles-dev/sparkles/internal/agent"
	"github.com/sparkles-dev/sparkles/internal/cluster"
	"github.com/sparkles-dev/sparkles/sandbox"
)

// A sandbox's agent config (its mode and model) is what the agent
// announced with its session, changed by what was asked at create and by
// PATCH since. The sandbox resource's config is both the record and the
// wish: a change asked while the agent is not running is recorded there
// and applied at the next boot, right after session/new or session/load,
// as a change at create is; every boot applies the recorded mode and model
// to the session it opens, so a new session keeps them.

// configCallTimeout bounds the agent's answer to session/set_mode,
// session/set_model or session/set_config_option. The box waits for it
// (no turn can start meanwhile), so it is short.
const configCallTimeout = 30 * time.Second

// checkConfigChange checks a mode and a model asked for: ids the agent
// cannot have are refused before they reach it.
func checkConfigChange(ch sandbox.ConfigChange) error {
	for what, id := range map[string]string{"mode": ch.Mode, "model": ch.Model} {
		if len(id) > sandbox.MaxConfigIDBytes || strings.ContainsFunc(id, func(r rune) bool { return r < ' ' || r == 0x7f }) {
			return sandbox.Errorf(sandbox.EInvalidRequest, "config.%s must be at most %d bytes without control characters", what, sandbox.MaxConfigIDBytes)
		}
	}
	return nil
}

// SetConfig changes a sandbox's mode, model or both, between turns
// (docs/api.md): through the running agent, which must offer them, or
// recorded for the next boot when no agent runs. It answers the sandbox.
func (c *Coordinator) SetConfig(ctx context.Context, id string, ch sandbox.ConfigChange) (sandbox.Sandbox, error) {
	if ch.Mode == "" && ch.Model == "" {
		return sandbox.Sandbox{}, sandbox.Errorf(sandbox.EInvalidRequest, "config needs a mode or a model")
	}
	if err := checkConfigChange(ch); err != nil {
		return sandbox.Sandbox{}, err
	}
	return callAs[sandbox.Sandbox](ctx, c, cluster.Call{Op: cluster.OpConfig, SandboxID: id, Config: &ch})
}

// configure runs a config change on the box's goroutine.
func (b *box) configure(ch sandbox.ConfigChange) (sandbox.Sandbox, error) {
	if b.deleted {
		return sandbox.Sandbox{}, sandbox.Errorf(sandbox.EConflict, "the sandbox is deleted")
	}
	if b.turn != nil {
		return sandbox.Sandbox{}, sandbox.Errorf(sandbox.EConflict, "a turn is open: change the config between turns")
	}
	if b.booting {
		return sandbox.Sandbox{}, sandbox.Errorf(sandbox.EConflict, "the agent is starting: change the config once it is ready")
	}
	st, err := b.c.store.State(context.Background(), b.id)
	if err != nil {
		return sandbox.Sandbox{}, err
	}
	tr, _, err := b.translator()
	if err != nil {
		return sandbox.Sandbox{}, err
	}
	cur := st.Sandbox.Config
	if cur == nil {
		cur = &sandbox.AgentConfig{}
	}
	// What the agent announced last, when it did: ids it does not offer
	// are refused with its choices.
	for _, x := range []struct {
		what, id string
		list     []sandbox.ConfigChoice
	}{{"mode", ch.Mode, cur.Modes}, {"model", ch.Model, cur.Models}} {
		if x.id != "" && len(x.list) > 0 && !sandbox.Has(x.list, x.id) {
			return sandbox.Sandbox{}, sandbox.Errorf(sandbox.EInvalidRequest, "%s", choiceMessage(x.what, x.id, x.list))
		}
	}
	tr.Known(cur)
	if b.conn == nil {
		want := *cur.Clone()
		if ch.Mode != "" {
			want.Mode = ch.Mode
		}
		if ch.Model != "" {
			want.Model = ch.Model
		}
		if err := b.emit(tr.Config(want)); err != nil {
			return sandbox.Sandbox{}, err
		}
		return b.c.store.Sandbox(context.Background(), b.id)
	}
	ctx, cancel := context.WithTimeout(b.c.ctx, configCallTimeout)
	defer cancel()
	var fail error
	if ch.Mode != "" {
		fail = b.conn.SetMode(ctx, ch.Mode)
	}
	if fail == nil && ch.Model != "" {
		fail = b.conn.SetModel(ctx, ch.Model)
	}
	// What took is recorded, also when the second half failed.
	if err := b.emit(tr.Config(agentConfig(b.conn.SessionConfig()))); err != nil {
		return sandbox.Sandbox{}, err
	}
	if fail != nil {
		return sandbox.Sandbox{}, b.configError(fail)
	}
	return b.c.store.Sandbox(context.Background(), b.id)
}

// configError is the answer to a change the running agent did not take.
func (b *box) configError(err error) error {
	if ce, ok := errors.AsType[*agent.ChoiceError](err); ok {
		return sandbox.Errorf(sandbox.EInvalidRequest, "%s", b.sanitize(ce.Error(), maxStatusDetail))
	}
	if rpc, ok := errors.AsType[*agent.RPCError](err); ok {
		b.log().Warn("the agent refused a config change", "reply", rpc)
		return sandbox.Errorf(sandbox.EConflict, "the agent refused the change: %s", b.sanitize(rpc.Message, maxStatusDetail))
	}
	b.log().Warn("config change", "err", err)
	return sandbox.Errorf(sandbox.EConflict, "the agent did not answer the change")
}

// choiceMessage names the choices of a refused id.
func choiceMessage(what, id string, list []sandbox.ConfigChoice) string {
	ids := make([]string, len(list))
	for i, c := range list {
		ids[i] = c.ID
	}
	return fmt.Sprintf("the agent offers no %s %q: it offers %s", what, id, strings.Join(ids, ", "))
}

// configAtBoot is what a boot applies: the mode and the model recorded in
// the sandbox (st is read on the box's goroutine), which the translator
// learns as the config the sandbox shows.
func (b *box) configAtBoot(st sandbox.State) sandbox.ConfigChange {
	b.tr.Known(st.Sandbox.Config)
	if st.Sandbox.Config == nil {
		return sandbox.ConfigChange{}
	}
	return sandbox.ConfigChange{Mode: st.Sandbox.Config.Mode, Model: st.Sandbox.Config.Model}
}

// applyConfig sets the recorded mode and model on a session the agent
// just opened, where it is not in them already, and returns why what it
// did not take failed. It runs in the boot's goroutine, before the box
// reads the agent's inbox: the few updates an agent sends about the change
// wait there.
func applyConfig(ctx context.Context, conn *agent.Conn, want sandbox.ConfigChange) []error {
	var errs []error
	sc := conn.SessionConfig()
	if want.Mode != "" && want.Mode != sc.Mode {
		if err := conn.SetMode(ctx, want.Mode); err != nil {
			errs = append(errs, err)
		}
	}
	if want.Model != "" && want.Model != sc.Model {
		if err := conn.SetModel(ctx, want.Model); err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}

// configBooted curates the config the booted agent works in, which its
// ready status writes into the resource: what an agent announces when it
// starts is part of its start, as its status is, and not an event (a
// sandbox.updated records a change). It returns a sandbox.error for each
// recorded mode or model the agent did not take.
func (b *box) configBooted(res bootResult) (*sandbox.AgentConfig, []*sandbox.Event) {
	raw := agentConfig(res.conn.SessionConfig())
	// An agent that announces nothing adds nothing to a sandbox that
	// shows nothing.
	if b.tr.CurrentConfig() != nil || raw.Mode != "" || raw.Model != "" || len(raw.Modes)+len(raw.Models) > 0 {
		b.tr.Config(raw)
	}
	var evs []*sandbox.Event
	for _, err := range res.configErrs {
		msg := "the agent did not take the mode or model asked for"
		if ce, ok := errors.AsType[*agent.ChoiceError](err); ok {
			msg = ce.Error()
		} else if rpc, ok := errors.AsType[*agent.RPCError](err); ok {
			msg = "the agent refused the mode or model asked for: " + rpc.Message
		}
		evs = append(evs, b.tr.Error(sandbox.ErrConfigFailed, b.sanitize(msg, maxStatusDetail))...)
	}
	return b.tr.CurrentConfig(), evs
}

// readyMutate is the ready status of a booted agent with its config.
func (b *box) readyMutate(detail string, cfg *sandbox.AgentConfig) func(*sandbox.State) error {
	status := b.statusMutate(sandbox.StatusReady, detail)
	return func(st *sandbox.State) error {
		if cfg != nil && st.Sandbox.Status != sandbox.StatusDeleted {
			st.Sandbox.Config = cfg.Clone()
		}
		return status(st)
	}
}

// agentConfig is the agent's raw config in the sandbox's types, for the
// translator to curate.
func agentConfig(sc agent.SessionConfig) sandbox.AgentConfig {
	conv := func(in []agent.Choice) []sandbox.ConfigChoice {
		out := make([]sandbox.ConfigChoice, len(in))
		for i, c := range in {
			out[i] = sandbox.ConfigChoice{ID: c.ID, Name: c.Name}
		}
		return out
	}
	return sandbox.AgentConfig{Mode: sc.Mode, Model: sc.Model, Modes: conv(sc.Modes), Models: conv(sc.Models)}
}
