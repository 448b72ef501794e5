package sandbox

import "time"

// Webhook is a registered webhook endpoint as the API answers it
// (docs/webhooks.md): never its signing secret, which only the answers of
// its creation and of a rotation carry (CreatedWebhook).
type Webhook struct {
	Object string `json:"object"` // "webhook"
	ID     string `json:"id"`     // "wh_" and 26 base32 characters
	URL    string `json:"url"`
	// Events are the durable event types delivered; empty in a request
	// means DefaultWebhookEvents.
	Events []Type `json:"events"`
	// SandboxID, when set, limits deliveries to that sandbox's events.
	SandboxID   string `json:"sandbox_id,omitempty"`
	Description string `json:"description,omitempty"`
	Enabled     bool   `json:"enabled"`
	// State is WebhookActive, WebhookFailing (its last attempt failed and
	// a retry is due) or WebhookDisabled.
	State string `json:"state"`
	// DisabledReason says why deliveries stopped when they stopped on
	// their own (an event failing for longer than the retry window).
	DisabledReason string    `json:"disabled_reason,omitempty"`
	CreatedAt      time.Time `json:"created_at"`
	// Stats are this node's figures of the endpoint's deliveries.
	Stats WebhookStats `json:"stats"`
}

// States of a webhook endpoint.
const (
	WebhookActive   = "active"
	WebhookFailing  = "failing"
	WebhookDisabled = "disabled"
)

// DefaultWebhookEvents are the types an endpoint receives when it names none.
var DefaultWebhookEvents = []Type{TypeTurnCompleted, TypeApprovalRequested, TypeSandboxError}

// WebhookStats are the delivery figures of one endpoint, as counted by the
// node that answers (since it started).
type WebhookStats struct {
	Delivered uint64 `json:"delivered"` // attempts answered 2xx
	Failed    uint64 `json:"failed"`    // attempts that failed
	// Lag is how many events of the sandboxes this node delivers lie
	// beyond the endpoint's cursors, up to the logs' heads (whether the
	// endpoint wants them or not).
	Lag uint64 `json:"lag"`
	// OldestUndeliveredAt is the time of the oldest event still waiting
	// to be delivered, if one is.
	OldestUndeliveredAt *time.Time       `json:"oldest_undelivered_at,omitempty"`
	LastAttempt         *WebhookDelivery `json:"last_attempt,omitempty"`
}

// CreatedWebhook is the answer to a creation or a rotation: the endpoint
// and its signing secret ("whsec_" and base64, the Standard Webhooks
// format), shown this once.
type CreatedWebhook struct {
	Webhook
	Secret string `json:"secret"`
}

// WebhookParams create an endpoint.
type WebhookParams struct {
	URL         string `json:"url"`
	Events      []Type `json:"events,omitempty"`
	SandboxID   string `json:"sandbox_id,omitempty"`
	Description string `json:"description,omitempty"`
}

// WebhookPatch changes an endpoint; nil fields stay. Enabling an endpoint
// clears its disabled reason and resumes from its cursors.
type WebhookPatch struct {
	URL         *string `json:"url,omitempty"`
	Events      []Type  `json:"events,omitempty"`
	Description *string `json:"description,omitempty"`
	Enabled     *bool   `json:"enabled,omitempty"`
}

// WebhookDelivery is one attempt to deliver an event to an endpoint.
type WebhookDelivery struct {
	Object string `json:"object"` // "webhook_delivery"
	// ID is the webhook-id header: the same for every attempt of one
	// event to one endpoint, so receivers deduplicate on it; the retry
	// route takes it.
	ID        string    `json:"id"`
	SandboxID string    `json:"sandbox_id"`
	EventID   Seq       `json:"event_id"`
	Type      Type      `json:"type"`
	Attempt   int       `json:"attempt"` // 1 for the first attempt of the event
	At        time.Time `json:"at"`
	// StatusCode is the receiver's answer, 0 when there was none.
	StatusCode int   `json:"status_code"`
	DurationMS int64 `json:"duration_ms"`
	// Error says why the attempt failed; empty when it succeeded.
	Error string `json:"error,omitempty"`
	// Response is the start of the response's body (256 bytes at most).
	Response string `json:"response,omitempty"`
	// NextAttemptAt is when the event is tried again, after a failure.
	NextAttemptAt *time.Time `json:"next_attempt_at,omitempty"`
}
