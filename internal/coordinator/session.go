package coordinator

import (
	"context"

	"github.com/sparkles-dev/sparkles/internal/agent"
	"github.com/sparkles-dev/sparkles/sandbox"
)

// Messages of a boot that could not go on with the agent's earlier session.
const (
	sessionLostMsg    = "the agent could not load its earlier session, so a new one was opened: it does not remember the earlier turns"
	sessionLostDetail = "the agent is ready in a new session: it could not load its earlier one and does not remember the earlier turns"
)

// resumed looks at how a booted agent's session came to be: it keeps the
// session for the next boot, counts what the agent replayed while loading
// as dropped updates, and returns the status detail and, when the earlier
// session was lost, the sandbox.error that says so.
func (b *box) resumed(conn *agent.Conn) (detail string, evs []*sandbox.Event) {
	r := conn.Resume()
	if r.Replayed > 0 {
		// The history of the conversation, which its own turns already
		// told in the log: not news, and not events of any turn.
		b.c.cfg.Observer.UpdatesDropped(dropReplayed, int(r.Replayed))
	}
	detail = "the agent is ready"
	switch {
	case r.Loaded:
		detail = "the agent is ready; it goes on with its earlier session"
	case r.Err != nil:
		b.log().Warn("the agent lost its earlier session", "err", r.Err)
		detail, evs = sessionLostDetail, b.tr.Error(sandbox.ErrSessionLost, sessionLostMsg)
	case r.Asked != "" && !r.Supported:
		b.log().Info("the agent cannot load sessions (no loadSession); it starts a new one")
	}
	b.session = conn.SessionID()
	b.sessionKept = b.session == r.Asked
	return detail, evs
}

// sessionInUse keeps the open session as the one to load next time, once
// a turn goes to it. A session that never had a turn holds no
// conversation: kept, its load could only fail (an agent writes a session
// down with its first message) and tell of a loss where there is none.
func (b *box) sessionInUse() {
	if b.sessionKept || b.session == "" {
		return
	}
	b.sessionKept = true
	b.keepSession(b.session)
}

// dropReplayed is the drop counter of the updates an agent replays while
// it loads a session.
const dropReplayed = "session_replay"

// keepSession writes the agent's session id into the sandbox's private
// state, where the next boot reads it. A failed write only costs the next
// boot its session/load.
func (b *box) keepSession(id string) {
	err := b.c.store.Append(context.Background(), b.id, nil, func(st *sandbox.State) error {
		st.AgentSession = id
		return nil
	})
	if err != nil {
		b.log().Error("keep the agent's session", "err", err)
	}
}
