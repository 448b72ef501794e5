package natsstore

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sparkles-dev/sparkles/sandbox"
)

// Keys of the KV bucket (see doc.go).
func stateKey(id string) string            { return "state." + id }
func configKey(id string) string           { return "config." + id }
func turnKey(id, turnID string) string     { return "turn." + id + "." + turnID }
func approvalKey(id, apprID string) string { return "appr." + id + "." + apprID }

// validID reports whether id can be one token of a subject and of a key:
// ids of this project are prefixed lower-case ULIDs, and anything with a
// dot, a wildcard or a space would address more than one sandbox.
func validID(id string) bool {
	if id == "" || len(id) > 200 {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// nullIDPrefix is how every stored envelope begins: the stream assigns the
// id at publish, so the message carries the envelope with a null id and a
// reader splices the sequence in.
var (
	nullIDPrefix = []byte(`{"id":null`)
	typePrefix   = []byte(`{"id":null,"object":"sandbox.event","version":"v1","type":"`)
)

// encodeEvent returns the message body of an event: its envelope without id.
func encodeEvent(ev *sandbox.Event, sandboxID string, data []byte) []byte {
	b := make([]byte, 0, len(data)+len(sandboxID)+len(ev.TurnID)+160)
	return sandbox.AppendEnvelope(b, 0, ev.Type, ev.TS, sandboxID, ev.TurnID, data)
}

// recordOf builds the record readers share from a stored body and its
// sequence, which is the event id: one allocation, no decoding.
func recordOf(seq uint64, body []byte) (sandbox.Record, error) {
	if !bytes.HasPrefix(body, typePrefix) {
		return sandbox.Record{}, fmt.Errorf("event %d: not an envelope with a null id", seq)
	}
	rest := body[len(typePrefix):]
	end := bytes.IndexByte(rest, '"')
	if end < 0 {
		return sandbox.Record{}, fmt.Errorf("event %d: truncated type", seq)
	}
	tail := body[len(nullIDPrefix):]
	b := make([]byte, 0, len(tail)+24)
	b = append(b, `{"id":"`...)
	b = strconv.AppendUint(b, seq, 10)
	b = append(b, '"')
	b = append(b, tail...)
	return sandbox.Record{ID: seq, Type: sandbox.Type(rest[:end]), JSON: b}, nil
}

// servedLen is the length of the envelope recordOf makes of a stored body
// with its sequence spliced in: what the event counts for in the log's
// bytes (sandbox.State.LogBytes), the same as in every store.
func servedLen(seq uint64, body []byte) int {
	var digits [20]byte
	return len(body) - len(nullIDPrefix) + len(`{"id":""`) + len(strconv.AppendUint(digits[:0], seq, 10))
}

// foldTime is the ts a reader of the log decodes: UTC, truncated to the
// millisecond like the envelope writes it. The state is folded with it so
// it matches what a client folds from the same records.
func foldTime(ts time.Time) time.Time { return ts.UTC().Truncate(time.Millisecond) }

// decodeSandbox decodes only the sandbox resource at the head of a state
// record. Every node decodes every state change it is told of, and the
// resource is all that Head, Sandbox and listings need; the rest (message
// snapshots of a turn) can be large.
func decodeSandbox(b []byte) (sandbox.Sandbox, error) {
	var sb sandbox.Sandbox
	dec := json.NewDecoder(bytes.NewReader(b))
	if tok, err := dec.Token(); err == nil && tok == json.Delim('{') {
		if key, err := dec.Token(); err == nil && key == "sandbox" {
			if err := dec.Decode(&sb); err != nil {
				return sb, fmt.Errorf("decode state: %w", err)
			}
			return sb, nil
		}
	}
	var st sandbox.State
	if err := json.Unmarshal(b, &st); err != nil {
		return sb, fmt.Errorf("decode state: %w", err)
	}
	return st.Sandbox, nil
}

// record is what a state key holds: the state, the sandbox resource first
// (decodeSandbox relies on it), and the epoch of the fence of the node
// that holds the sandbox's log, which a takeover moves (see fence.go).
type record struct {
	*sandbox.State
	Owner uint64 `json:"owner,omitempty"`
}

func decodeState(b []byte) (*sandbox.State, uint64, error) {
	r := record{State: new(sandbox.State)}
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, 0, fmt.Errorf("decode state: %w", err)
	}
	return r.State, r.Owner, nil
}

func encodeState(st *sandbox.State, owner uint64) ([]byte, error) {
	b, err := json.Marshal(record{State: st, Owner: owner})
	if err != nil {
		return nil, fmt.Errorf("encode state: %w", err)
	}
	return b, nil
}

// fencePrefix is the subject space of the fences beside the logs under
// prefix: the same tokens, the last one marked, so that bothPrefix (the
// last token a wildcard) covers a sandbox's log and fence and nothing else
// in the stream.
func fencePrefix(prefix string) string { return prefix + "-fence" }

func bothPrefix(prefix string) string {
	if i := strings.LastIndexByte(prefix, '.'); i >= 0 {
		return prefix[:i+1] + "*"
	}
	return "*"
}

// Direct get replies end a batch with a status message and no body.
const (
	statusNoContent = "204" // end of batch
	statusNotFound  = "404" // nothing at or after the sequence
)

// getBatch reads up to n messages of subject with a sequence >= from, in
// order, in one round trip: a batched direct get, which keeps no state on
// the server. A reply cut short by maxBytes ends early; the caller pages.
// Unlike a consumer it reports a stalled server as an error rather than as
// an empty page, which a reader would take for the end of the log.
//
// upTo, when not 0, is a sequence the caller knows the subject has a
// message at or beyond (the last id of the log that it read from the
// state): a reply that ends before it, saying nothing more is pending,
// came from a replica that has not caught up, since any replica of a
// replicated stream may answer a direct get. The rest, up to upTo, is then
// read from the stream's leader, a message at a time; a message deleted
// since is not there either.
func (s *Store) getBatch(ctx context.Context, subject string, from uint64, n, maxBytes int, upTo uint64) ([]*nats.Msg, error) {
	if n < 1 {
		return nil, nil
	}
	ctx, cancel := s.opCtx(ctx)
	defer cancel()
	msgs, pending, err := s.directBatch(ctx, subject, from, n, maxBytes)
	if err != nil {
		return nil, err
	}
	if h := s.hooks.Load(); h != nil && h.laggingLog != nil {
		msgs, pending = h.laggingLog(msgs), 0
	}
	if upTo == 0 || len(msgs) >= n || pending > 0 {
		return msgs, nil
	}
	next := from
	if len(msgs) > 0 {
		last, err := msgSeq(msgs[len(msgs)-1])
		if err != nil {
			return nil, err
		}
		next = last + 1
	}
	for next <= upTo && len(msgs) < n {
		msg, seq, err := s.leaderNext(ctx, subject, next)
		if err != nil {
			return nil, fmt.Errorf("read %s from %d: %w", subject, next, err)
		}
		if msg == nil || seq > upTo {
			break
		}
		msgs = append(msgs, msg)
		next = seq + 1
	}
	return msgs, nil
}

// directBatch is one batched direct get: the messages, and how many more
// the replica that answered has pending after them.
func (s *Store) directBatch(ctx context.Context, subject string, from uint64, n, maxBytes int) ([]*nats.Msg, uint64, error) {
	inbox := nats.NewInbox()
	sub, err := s.nc.SubscribeSync(inbox)
	if err != nil {
		return nil, 0, err
	}
	defer sub.Unsubscribe()
	req, err := json.Marshal(struct {
		Seq      uint64 `json:"seq"`
		NextFor  string `json:"next_by_subj"`
		Batch    int    `json:"batch"`
		MaxBytes int    `json:"max_bytes,omitempty"`
	}{from, subject, n, maxBytes})
	if err != nil {
		return nil, 0, err
	}
	if err := s.nc.PublishRequest("$JS.API.DIRECT.GET."+s.streamName, inbox, req); err != nil {
		return nil, 0, err
	}
	msgs := make([]*nats.Msg, 0, min(n, 256))
	for {
		msg, err := sub.NextMsgWithContext(ctx)
		if err != nil {
			return nil, 0, fmt.Errorf("read %s from %d: %w", subject, from, err)
		}
		if len(msg.Data) == 0 {
			if status := msg.Header.Get("Status"); status != "" {
				switch status {
				case statusNoContent:
					pending, _ := strconv.ParseUint(msg.Header.Get(numPendingHeader), 10, 64)
					return msgs, pending, nil
				case statusNotFound:
					return msgs, 0, nil
				default:
					return nil, 0, fmt.Errorf("read %s from %d: %s %s", subject, from, status, msg.Header.Get("Description"))
				}
			}
		}
		msgs = append(msgs, msg)
		if len(msgs) > n {
			return nil, 0, fmt.Errorf("read %s from %d: server sent more than %d messages", subject, from, n)
		}
	}
}

// numPendingHeader is what the end of a batched direct get says is left.
const numPendingHeader = "Nats-Num-Pending"

// msgSeq returns the stream sequence of a direct get reply.
func msgSeq(msg *nats.Msg) (uint64, error) {
	seq, err := strconv.ParseUint(msg.Header.Get(jetstream.SequenceHeader), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("direct get reply without a sequence: %w", err)
	}
	return seq, nil
}

// lastSeq returns the sequence of the last message of subject with a
// sequence <= upTo (any, when upTo is 0), and 0 when there is none.
func (s *Store) lastSeq(ctx context.Context, subject string, upTo uint64) (uint64, error) {
	last, err := s.lastSeqs(ctx, []string{subject}, upTo)
	return last[subject], err
}

// lastSeqs returns the sequence of the last message of each subject that
// has one (with a sequence <= upTo, when upTo is not 0), in one round trip.
// The server answers for at most 1024 subjects at once.
func (s *Store) lastSeqs(ctx context.Context, subjects []string, upTo uint64) (map[string]uint64, error) {
	ctx, cancel := s.opCtx(ctx)
	defer cancel()
	req, err := json.Marshal(struct {
		MultiLast []string `json:"multi_last"`
		UpToSeq   uint64   `json:"up_to_seq,omitempty"`
		Batch     int      `json:"batch"`
	}{subjects, upTo, len(subjects)})
	if err != nil {
		return nil, err
	}
	inbox := nats.NewInbox()
	sub, err := s.nc.SubscribeSync(inbox)
	if err != nil {
		return nil, err
	}
	defer sub.Unsubscribe()
	if err := s.nc.PublishRequest("$JS.API.DIRECT.GET."+s.streamName, inbox, req); err != nil {
		return nil, err
	}
	last := make(map[string]uint64, len(subjects))
	for {
		msg, err := sub.NextMsgWithContext(ctx)
		if err != nil {
			return nil, fmt.Errorf("last sequences: %w", err)
		}
		if len(msg.Data) == 0 && msg.Header.Get("Status") != "" {
			switch msg.Header.Get("Status") {
			case statusNoContent, statusNotFound:
				return last, nil
			default:
				return nil, fmt.Errorf("last sequences: %s %s", msg.Header.Get("Status"), msg.Header.Get("Description"))
			}
		}
		seq, err := msgSeq(msg)
		if err != nil {
			return nil, err
		}
		last[msg.Header.Get(jetstream.SubjectHeader)] = seq
	}
}

// lastBoth returns the last sequences of the log and of the fence subject
// of sandbox id (0 for none), in one round trip.
func (s *Store) lastBoth(ctx context.Context, id string) (tip, fence uint64, err error) {
	last, err := s.lastSeqs(ctx, []string{s.subject(id), s.fenceSubject(id)}, 0)
	if err != nil {
		return 0, 0, fmt.Errorf("sandbox %s: %w", id, err)
	}
	return last[s.subject(id)], last[s.fenceSubject(id)], nil
}

// purge removes the messages of subject with a sequence < before and
// returns how many it removed, which the client library's Purge does not.
// before 0 purges the whole subject.
func (s *Store) purge(ctx context.Context, stream, subject string, before uint64) (uint64, error) {
	ctx, cancel := s.opCtx(ctx)
	defer cancel()
	req, err := json.Marshal(jetstream.StreamPurgeRequest{Subject: subject, Sequence: before})
	if err != nil {
		return 0, err
	}
	msg, err := s.nc.RequestWithContext(ctx, "$JS.API.STREAM.PURGE."+stream, req)
	if err != nil {
		return 0, fmt.Errorf("purge %s: %w", subject, err)
	}
	var resp struct {
		Success bool                `json:"success"`
		Purged  uint64              `json:"purged"`
		Error   *jetstream.APIError `json:"error"`
	}
	if err := json.Unmarshal(msg.Data, &resp); err != nil {
		return 0, fmt.Errorf("purge %s: %w", subject, err)
	}
	if resp.Error != nil {
		return 0, fmt.Errorf("purge %s: %w", subject, resp.Error)
	}
	if !resp.Success {
		return 0, fmt.Errorf("purge %s: not done", subject)
	}
	return resp.Purged, nil
}

// isConflict reports whether a KV write lost a revision check: another
// writer changed the key since it was read.
func isConflict(err error) bool {
	return errors.Is(err, jetstream.ErrKeyRevisionMismatch) || errors.Is(err, jetstream.ErrKeyExists) ||
		errors.Is(err, errStateMoved)
}

func notFound(id string) error {
	return sandbox.Errorf(sandbox.ENotFound, "sandbox %s not found", id)
}
