package sandbox

import (
	"encoding/json"
	"time"
)

// The resources write their timestamps as every ts is written (TimeFormat:
// exactly three digits of milliseconds). encoding/json would write
// time.Time as RFC 3339 with trailing zeros dropped ("…:05.12Z",
// "…:05Z"), which the contract and its OpenAPI document refuse.
//
// A struct that embeds Sandbox or Turn inherits these methods, and with
// them loses its own fields from its JSON; such a struct needs a
// MarshalJSON of its own (see the create answer in server and client).

// MarshalJSON writes the sandbox with its timestamps in TimeFormat.
func (sb Sandbox) MarshalJSON() ([]byte, error) {
	type plain Sandbox
	return json.Marshal(struct {
		plain
		CreatedAt string `json:"created_at"`
		UpdatedAt string `json:"updated_at"`
	}{plain(sb), FormatTime(sb.CreatedAt), FormatTime(sb.UpdatedAt)})
}

// MarshalJSON writes the turn with its timestamps in TimeFormat.
func (t Turn) MarshalJSON() ([]byte, error) {
	type plain Turn
	var completed *string
	if t.CompletedAt != nil {
		s := FormatTime(*t.CompletedAt)
		completed = &s
	}
	return json.Marshal(struct {
		plain
		CreatedAt   string  `json:"created_at"`
		CompletedAt *string `json:"completed_at"`
	}{plain(t), FormatTime(t.CreatedAt), completed})
}

// FormatTime writes a timestamp as the contract does: UTC, RFC 3339, three
// digits of milliseconds.
func FormatTime(t time.Time) string { return t.UTC().Format(TimeFormat) }

// AppendObjectField appends "name":value to the JSON object obj (as
// encoding/json writes it, ending in '}'), for answers that add a field to
// a resource that marshals itself.
func AppendObjectField(obj []byte, name string, value any) ([]byte, error) {
	v, err := json.Marshal(value)
	if err != nil {
		return nil, err
	}
	k, _ := json.Marshal(name)
	out := obj[:len(obj)-1]
	if len(out) > 1 {
		out = append(out, ',')
	}
	out = append(out, k...)
	out = append(out, ':')
	out = append(out, v...)
	return append(out, '}'), nil
}
