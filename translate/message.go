package translate

import (
	"encoding/json"
	"strings"
	"time"

	"github.com/sparkles-dev/sparkles/sandbox"
)

// MaxPartBytes bounds the text of one message part; agent lines can be many
// MiB, and every snapshot of a part repeats its whole text.
const MaxPartBytes = 1 << 20

// bigPart is the size beyond which a part's flush interval grows with it, so
// the bytes of snapshots written per second stay bounded.
const bigPart = 64 << 10

// message is one assistant message of the turn.
type message struct {
	id      string
	agentID string // the agent's messageId, "" while it gave none
	parts   []*part
}

// part is one run of text or reasoning within a message.
type part struct {
	id        string
	msg       *message
	index     int
	kind      string
	text      strings.Builder // raw, never emitted as is
	truncated bool

	sent   string    // text of the last message.updated
	sentAt time.Time // zero until the first message.updated
	dirty  bool      // text arrived that no message.updated carries yet
	final  string    // the redacted whole text, once closed
}

func (t *Translator) chunk(now time.Time, kind string, u *rawUpdate) []*sandbox.Event {
	var c contentBlock
	if err := json.Unmarshal(u.Content, &c); err != nil {
		t.drop(DropMalformed)
		return nil
	}
	mid, err := optString(u.MessageID)
	if err != nil {
		t.drop(DropMalformed)
		return nil
	}
	t.stats.Chunks++
	if c.Type != "text" {
		t.drop(DropNonTextContent)
		return nil
	}
	if c.Text == "" {
		return nil
	}
	var evs []*sandbox.Event
	msg := t.messageFor(mid)
	p := t.open
	if p == nil || p.msg != msg || p.kind != kind {
		evs = t.closePart(now, evs)
		p = &part{id: t.newID(sandbox.PrefixPart), msg: msg, index: len(msg.parts), kind: kind}
		msg.parts = append(msg.parts, p)
		t.parts = append(t.parts, p)
		t.open = p
	}
	if !p.append(c.Text) {
		t.drop(DropTruncated)
	}
	if p.sentAt.IsZero() || now.Sub(p.sentAt) >= t.partInterval(p) {
		return t.emit(now, p, evs)
	}
	p.dirty = true
	return evs
}

// messageFor returns the message a chunk with the agent's messageId mid
// belongs to. Chunks without a messageId stay in the current message; the
// first messageId seen is adopted by a message started without one.
func (t *Translator) messageFor(mid *string) *message {
	if mid != nil && *mid != "" {
		id := *mid
		if t.cur != nil && t.cur.agentID == id {
			return t.cur
		}
		if m, ok := t.byAgent[id]; ok {
			t.cur = m
			return m
		}
		if t.cur != nil && t.cur.agentID == "" {
			t.cur.agentID = id
			t.byAgent[id] = t.cur
			return t.cur
		}
		t.cur = &message{id: t.newID(sandbox.PrefixMessage), agentID: id}
		t.byAgent[id] = t.cur
		return t.cur
	}
	if t.cur == nil {
		t.cur = &message{id: t.newID(sandbox.PrefixMessage)}
	}
	return t.cur
}

// append adds text up to MaxPartBytes; it reports false when some was cut.
func (p *part) append(s string) bool {
	room := MaxPartBytes - p.text.Len()
	if len(s) <= room {
		p.text.WriteString(s)
		return true
	}
	if !p.truncated {
		for room > 0 && !isRuneStart(s[room]) {
			room--
		}
		p.text.WriteString(s[:room])
		p.truncated = true
	}
	return false
}

func (t *Translator) partInterval(p *part) time.Duration {
	if n := p.text.Len(); n > bigPart {
		return t.interval * time.Duration(n/bigPart)
	}
	return t.interval
}

// emit sends the open part's snapshot: its text redacted and cut before
// anything that could still grow into a secret. Nothing is sent when that
// adds nothing to the last snapshot.
func (t *Translator) emit(now time.Time, p *part, evs []*sandbox.Event) []*sandbox.Event {
	s := p.text.String()
	snap, _ := t.red.scrub(s, t.red.hold(s))
	p.dirty = false
	if snap == p.sent {
		return evs
	}
	p.sent, p.sentAt = snap, now
	return append(evs, t.partEvent(now, p, snap))
}

// closePart closes the open part with a final message.updated carrying its
// whole redacted text, unless the last one already did.
func (t *Translator) closePart(now time.Time, evs []*sandbox.Event) []*sandbox.Event {
	p := t.open
	if p == nil {
		return evs
	}
	t.open = nil
	s := p.text.String()
	cut := len(s)
	if p.truncated {
		// The cut may have split a secret; its start must not show.
		cut = t.red.hold(s)
	}
	final, n := t.red.scrub(s, cut)
	t.stats.Redactions += n
	p.final, p.dirty = final, false
	p.text = strings.Builder{}
	if final == p.sent {
		return evs
	}
	p.sent, p.sentAt = final, now
	return append(evs, t.partEvent(now, p, final))
}

func (t *Translator) partEvent(now time.Time, p *part, text string) *sandbox.Event {
	return t.event(now, sandbox.TypeMessageUpdated, &sandbox.MessageUpdated{
		MessageID: p.msg.id, PartID: p.id, Index: p.index, Kind: p.kind, Text: text,
	})
}

// Flush emits the coalesced message.updated and turn.usage whose interval
// has passed.
func (t *Translator) Flush() []*sandbox.Event {
	now := t.now()
	evs := t.flushUsage(now)
	evs = t.flushOutputs(now, evs)
	p := t.open
	if p == nil || !p.dirty {
		return evs
	}
	if now.Sub(p.sentAt) < t.partInterval(p) {
		return evs
	}
	return t.emit(now, p, evs)
}

// NextFlush returns when Flush next has something to emit.
func (t *Translator) NextFlush() (time.Time, bool) {
	at, ok := t.nextUsage()
	if next, due := t.nextOutputFlush(); due && (!ok || next.Before(at)) {
		at, ok = next, true
	}
	p := t.open
	if p == nil || !p.dirty {
		return at, ok
	}
	if next := p.sentAt.Add(t.partInterval(p)); !ok || next.Before(at) {
		return next, true
	}
	return at, true
}

// completeMessages emits the turn's message.completed, if any: the final
// assistant message, redacted again as a whole.
func (t *Translator) completeMessages(now time.Time, evs []*sandbox.Event) []*sandbox.Event {
	parts := make([]sandbox.MessageUpdated, 0, len(t.parts))
	for _, p := range t.parts {
		parts = append(parts, sandbox.MessageUpdated{MessageID: p.msg.id, PartID: p.id, Index: p.index, Kind: p.kind, Text: p.final})
	}
	done := FinalMessage(parts)
	if done == nil {
		return evs
	}
	// Each part is redacted, but a secret that holds a blank line would
	// otherwise come whole again where the parts are joined.
	done.Text, _ = t.red.String(done.Text)
	return append(evs, t.event(now, sandbox.TypeMessageCompleted, done))
}

// FinalMessage returns the message.completed of a turn whose message parts,
// in the order they opened, are parts (each as its last message.updated
// showed it), or nil when no part holds text: the final assistant message is
// the message of the last text part that is not blank. Its parts are all the
// parts of that message; its text joins the text parts that are not blank
// with one blank line, the newlines on either side of each join dropped.
func FinalMessage(parts []sandbox.MessageUpdated) *sandbox.MessageCompleted {
	last := -1
	for i, p := range parts {
		if p.Kind == sandbox.PartText && strings.TrimSpace(p.Text) != "" {
			last = i
		}
	}
	if last < 0 {
		return nil
	}
	done := &sandbox.MessageCompleted{MessageID: parts[last].MessageID, Parts: []sandbox.Part{}}
	var texts []string
	for _, p := range parts {
		if p.MessageID != done.MessageID {
			continue
		}
		done.Parts = append(done.Parts, sandbox.Part{PartID: p.PartID, Index: p.Index, Kind: p.Kind, Text: p.Text})
		if p.Kind == sandbox.PartText && strings.TrimSpace(p.Text) != "" {
			texts = append(texts, p.Text)
		}
	}
	for i := range texts {
		if i > 0 {
			texts[i] = strings.TrimLeft(texts[i], "\r\n")
		}
		if i < len(texts)-1 {
			texts[i] = strings.TrimRight(texts[i], "\r\n")
		}
	}
	done.Text = strings.Join(texts, "\n\n")
	return done
}
