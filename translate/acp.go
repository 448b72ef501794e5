package translate

import (
	"encoding/json"
)

// The ACP v1 shapes this package reads, and only the fields it reads. Fields
// are json.RawMessage where one struct serves several update kinds, so that a
// field meaningless to one kind (a tool's content array) cannot make another
// kind's decode fail; each kind decodes its own fields with a typed helper.

// notification is the params of session/update.
type notification struct {
	Update *rawUpdate `json:"update"`
}

// rawUpdate is the union of the SessionUpdate variants we act on.
type rawUpdate struct {
	SessionUpdate string          `json:"sessionUpdate"`
	Content       json.RawMessage `json:"content"`
	MessageID     json.RawMessage `json:"messageId"`
	ToolCallID    json.RawMessage `json:"toolCallId"`
	Title         json.RawMessage `json:"title"`
	Kind          json.RawMessage `json:"kind"`
	Status        json.RawMessage `json:"status"`
	Locations     json.RawMessage `json:"locations"`
	// tool_call, tool_call_update: read only for the terminal output of
	// Config.ToolOutput (tooloutput.go).
	Meta json.RawMessage `json:"_meta"`
	// With a terminal exit only: the whole output when none was streamed.
	RawOutput json.RawMessage `json:"rawOutput"`
	// plan: the whole list of entries.
	Entries json.RawMessage `json:"entries"`
	// usage_update: the context window's tokens in use and its size, and
	// the session's cost so far.
	Used *int64          `json:"used"`
	Size *int64          `json:"size"`
	Cost json.RawMessage `json:"cost"`
}

// contentBlock is the part of an ACP ContentBlock that carries text.
type contentBlock struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

// rawLocation is an ACP ToolCallLocation.
type rawLocation struct {
	Path string `json:"path"`
	Line *int64 `json:"line"`
}

// permissionParams is the params of session/request_permission.
type permissionParams struct {
	ToolCall *rawUpdate  `json:"toolCall"`
	Options  []rawOption `json:"options"`
}

// rawOption is an ACP PermissionOption.
type rawOption struct {
	OptionID string `json:"optionId"`
	Name     string `json:"name"`
	Kind     string `json:"kind"`
}

// isNull reports whether an optional field is absent or null; ACP uses both
// for "no change" in tool_call_update.
func isNull(raw json.RawMessage) bool {
	return len(raw) == 0 || string(raw) == "null"
}

// optString decodes an optional string field.
func optString(raw json.RawMessage) (*string, error) {
	if isNull(raw) {
		return nil, nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return nil, err
	}
	return &s, nil
}

// toolFields is the decoded, not yet curated, content of a ToolCall or
// ToolCallUpdate.
type toolFields struct {
	agentID   string
	title     *string
	kind      *string
	status    *string
	locations []rawLocation
	hasLocs   bool
}

func decodeToolFields(u *rawUpdate) (toolFields, error) {
	var f toolFields
	if err := json.Unmarshal(u.ToolCallID, &f.agentID); err != nil {
		return f, err
	}
	if f.agentID == "" {
		return f, errNoToolCallID
	}
	var err error
	if f.title, err = optString(u.Title); err != nil {
		return f, err
	}
	if f.kind, err = optString(u.Kind); err != nil {
		return f, err
	}
	if f.status, err = optString(u.Status); err != nil {
		return f, err
	}
	if !isNull(u.Locations) {
		if err := json.Unmarshal(u.Locations, &f.locations); err != nil {
			return f, err
		}
		f.hasLocs = true
	}
	return f, nil
}

type decodeError string

func (e decodeError) Error() string { return string(e) }

const errNoToolCallID = decodeError("tool call without toolCallId")
