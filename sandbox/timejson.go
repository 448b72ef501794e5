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

// MarshalJSON writes the endpoint with its timestamps in TimeFormat.
func (w Webhook) MarshalJSON() ([]byte, error) {
	type plain Webhook
	return json.Marshal(struct {
		plain
		CreatedAt string `json:"created_at"`
	}{plain(w), FormatTime(w.CreatedAt)})
}

// MarshalJSON writes the endpoint and its secret (Webhook's method would
// drop the secret).
func (c CreatedWebhook) MarshalJSON() ([]byte, error) {
	b, err := c.Webhook.MarshalJSON()
	if err != nil {
		return nil, err
	}
	return AppendObjectField(b, "secret", c.Secret)
}

// MarshalJSON writes the figures with their timestamp in TimeFormat.
func (s WebhookStats) MarshalJSON() ([]byte, error) {
	type plain WebhookStats
	return json.Marshal(struct {
		plain
		OldestUndeliveredAt *string `json:"oldest_undelivered_at,omitempty"`
	}{plain(s), formatTimePtr(s.OldestUndeliveredAt)})
}

// MarshalJSON writes the attempt with its timestamps in TimeFormat.
func (d WebhookDelivery) MarshalJSON() ([]byte, error) {
	type plain WebhookDelivery
	return json.Marshal(struct {
		plain
		At            string  `json:"at"`
		NextAttemptAt *string `json:"next_attempt_at,omitempty"`
	}{plain(d), FormatTime(d.At), formatTimePtr(d.NextAttemptAt)})
}

func formatTimePtr(t *time.Time) *string {
	if t == nil {
		return nil
	}
	s := FormatTime(*t)
	return &s
}
