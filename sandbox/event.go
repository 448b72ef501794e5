package sandbox

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"time"
)

// Type names an event type of the public contract.
type Type string

// The event types of docs/events.md.
const (
	TypeSnapshot          Type = "snapshot"
	TypeSandboxStatus     Type = "sandbox.status"
	TypeTurnStarted       Type = "turn.started"
	TypeTurnCompleted     Type = "turn.completed"
	TypeMessageUpdated    Type = "message.updated"
	TypeMessageCompleted  Type = "message.completed"
	TypeToolUpdated       Type = "tool.updated"
	TypeApprovalRequested Type = "approval.requested"
	TypeApprovalResolved  Type = "approval.resolved"
	TypeSandboxError      Type = "sandbox.error"
	// TypeWorkspaceReverted records that the workspace was put back as
	// it was when a turn started (docs/workspace.md).
	TypeWorkspaceReverted Type = "workspace.reverted"
	// TypePlanUpdated carries the agent's whole plan of the turn, which
	// replaces the last one.
	TypePlanUpdated Type = "plan.updated"
	// TypeTurnUsage carries the running turn's usage so far, which
	// replaces the last.
	TypeTurnUsage Type = "turn.usage"
	// TypeToolOutput carries the tail of what a command the agent ran
	// printed, which replaces the tool's last one.
	TypeToolOutput Type = "tool.output"
	// TypeTurnQueued records a turn accepted to start after the turns
	// before it (docs/api.md).
	TypeTurnQueued Type = "turn.queued"
	// TypeSandboxUpdated carries the sandbox's agent config (mode and
	// model) as it now is.
	TypeSandboxUpdated Type = "sandbox.updated"
)

// DurableTypes are the types of the events written to the log.
var DurableTypes = []Type{
	TypeTurnStarted, TypeTurnCompleted, TypeMessageUpdated, TypeMessageCompleted,
	TypeToolUpdated, TypeApprovalRequested, TypeApprovalResolved, TypeSandboxError,
	TypeWorkspaceReverted, TypePlanUpdated, TypeTurnQueued, TypeTurnUsage, TypeToolOutput,
	TypeSandboxUpdated,
}

// Durable reports whether events of this type are written to the log and
// carry an id. Snapshot and status frames are transient.
func (t Type) Durable() bool { return slices.Contains(DurableTypes, t) }

// Envelope constants.
const (
	EventObject  = "sandbox.event"
	EventVersion = "v1"
)

// TimeFormat is RFC 3339 in UTC with milliseconds, as every ts is written.
const TimeFormat = "2006-01-02T15:04:05.000Z"

// Event is one public event. ID is 0 for transient frames (encoded as null),
// TurnID "" for events outside any turn (encoded as null). Data holds one of
// the payload types of this package (a pointer or a value); after decoding it
// is always a pointer to the payload type that Type names.
type Event struct {
	ID        uint64
	Type      Type
	TS        time.Time
	SandboxID string
	TurnID    string
	Data      any
}

// MarshalJSON writes the envelope with its fields in the order of docs/events.md.
func (e Event) MarshalJSON() ([]byte, error) {
	data, err := json.Marshal(e.Data)
	if err != nil {
		return nil, fmt.Errorf("encode %s data: %w", e.Type, err)
	}
	return AppendEnvelope(nil, e.ID, e.Type, e.TS, e.SandboxID, e.TurnID, data), nil
}

// AppendEnvelope appends the envelope JSON of an event whose data is already
// encoded. Stores use it to encode an event once, after the id is assigned,
// without marshalling its payload again.
func AppendEnvelope(b []byte, id uint64, typ Type, ts time.Time, sandboxID, turnID string, data []byte) []byte {
	b = append(b, `{"id":`...)
	if id == 0 {
		b = append(b, "null"...)
	} else {
		b = append(b, '"')
		b = strconv.AppendUint(b, id, 10)
		b = append(b, '"')
	}
	b = append(b, `,"object":"sandbox.event","version":"v1","type":`...)
	b = appendString(b, string(typ))
	b = append(b, `,"ts":"`...)
	b = ts.UTC().AppendFormat(b, TimeFormat)
	b = append(b, `","sandbox_id":`...)
	b = appendString(b, sandboxID)
	b = append(b, `,"turn_id":`...)
	if turnID == "" {
		b = append(b, "null"...)
	} else {
		b = appendString(b, turnID)
	}
	b = append(b, `,"data":`...)
	if len(data) == 0 {
		data = []byte("{}")
	}
	b = append(b, data...)
	return append(b, '}')
}

func appendString(b []byte, s string) []byte {
	// Ids and type names are ASCII without quotes or escapes in practice; fall
	// back to encoding/json for anything else so the output is always valid.
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == '"' || c == '\\' || c >= 0x7f || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s)
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

type wireEvent struct {
	ID        *string         `json:"id"`
	Object    string          `json:"object"`
	Version   string          `json:"version"`
	Type      Type            `json:"type"`
	TS        string          `json:"ts"`
	SandboxID string          `json:"sandbox_id"`
	TurnID    *string         `json:"turn_id"`
	Data      json.RawMessage `json:"data"`
}

// UnmarshalJSON decodes an envelope and its data into the payload type that
// its type names. Unknown types keep their data as json.RawMessage.
func (e *Event) UnmarshalJSON(b []byte) error {
	var w wireEvent
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	*e = Event{Type: w.Type, SandboxID: w.SandboxID}
	if w.ID != nil {
		id, err := strconv.ParseUint(*w.ID, 10, 64)
		if err != nil {
			return fmt.Errorf("event id %q: %w", *w.ID, err)
		}
		e.ID = id
	}
	if w.TurnID != nil {
		e.TurnID = *w.TurnID
	}
	if w.TS != "" {
		ts, err := time.Parse(time.RFC3339Nano, w.TS)
		if err != nil {
			return fmt.Errorf("event ts: %w", err)
		}
		e.TS = ts
	}
	data, err := DecodeData(w.Type, w.Data)
	if err != nil {
		return err
	}
	e.Data = data
	return nil
}

// DecodeData decodes the data of an event of type typ into a pointer to its
// payload type.
func DecodeData(typ Type, raw json.RawMessage) (any, error) {
	var v any
	switch typ {
	case TypeSnapshot:
		v = new(Snapshot)
	case TypeSandboxStatus:
		v = new(SandboxStatus)
	case TypeTurnStarted:
		v = new(TurnStarted)
	case TypeTurnCompleted:
		v = new(TurnCompleted)
	case TypeMessageUpdated:
		v = new(MessageUpdated)
	case TypeMessageCompleted:
		v = new(MessageCompleted)
	case TypeToolUpdated:
		v = new(ToolUpdated)
	case TypeApprovalRequested:
		v = new(ApprovalRequested)
	case TypeApprovalResolved:
		v = new(ApprovalResolved)
	case TypeSandboxError:
		v = new(SandboxError)
	case TypeWorkspaceReverted:
		v = new(WorkspaceReverted)
	case TypePlanUpdated:
		v = new(PlanUpdated)
	case TypeTurnQueued:
		v = new(TurnQueuedData)
	case TypeTurnUsage:
		v = new(TurnUsage)
	case TypeToolOutput:
		v = new(ToolOutput)
	case TypeSandboxUpdated:
		v = new(SandboxUpdated)
	default:
		return append(json.RawMessage(nil), raw...), nil
	}
	if len(bytes.TrimSpace(raw)) == 0 || bytes.Equal(raw, []byte("null")) {
		return v, nil
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return nil, fmt.Errorf("%s data: %w", typ, err)
	}
	return v, nil
}

// Record is one durable event as a store keeps it: its id, its type and its
// envelope encoded once, shared by every reader.
type Record struct {
	ID   uint64
	Type Type
	JSON []byte
}

// Decode decodes the record's envelope.
func (r Record) Decode() (Event, error) {
	var e Event
	err := json.Unmarshal(r.JSON, &e)
	return e, err
}

// FormatID writes an event id as the decimal string of the contract.
func FormatID(id uint64) string { return strconv.FormatUint(id, 10) }

// PrepareAppend checks the i-th event of an append to the log of sandbox id
// and readies it for a store: it must be durable and belong to id (an empty
// SandboxID becomes id, a zero TS becomes now()). It returns the event's
// encoded data, "{}" when it has none. The error of a bad event is
// invalid_request.
func PrepareAppend(id string, i int, ev *Event, now func() time.Time) ([]byte, error) {
	if ev == nil {
		return nil, Errorf(EInvalidRequest, "append to %s: event %d is nil", id, i)
	}
	if !ev.Type.Durable() {
		return nil, Errorf(EInvalidRequest, "append to %s: %q events are transient and never stored", id, ev.Type)
	}
	if ev.SandboxID == "" {
		ev.SandboxID = id
	} else if ev.SandboxID != id {
		return nil, Errorf(EInvalidRequest, "append to %s: event belongs to sandbox %s", id, ev.SandboxID)
	}
	if ev.TS.IsZero() {
		ev.TS = now()
	}
	data, err := json.Marshal(ev.Data)
	if err != nil {
		return nil, fmt.Errorf("append to %s: encode %s data: %w", id, ev.Type, err)
	}
	if string(data) == "null" {
		data = []byte("{}")
	}
	return data, nil
}
