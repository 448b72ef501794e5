// Package webhook delivers a sandbox's durable events to registered HTTP
// endpoints, signed as the Standard Webhooks specification says, and
// serves the endpoints' API (api.go: the Loop implements server.Webhooks).
//
// A delivery is one more reader of the log: each endpoint keeps a durable
// cursor per sandbox, moved only past events the receiver answered 2xx,
// so deliveries are at least once and in order per endpoint and sandbox,
// and a restart resumes from the cursors. A worker saves its cursor per
// page of the log, shortly after its last save, before a retry's wait and
// when it stops, not after every delivery: a crash delivers again, with
// the same webhook-ids, what was taken since the last save. Retries back
// off exponentially with jitter; one endpoint's failures or slowness hold
// only its own workers, and an event failing for DisableAfter disables
// its endpoint.
//
// On a store that several coordinators share, each delivers the sandboxes
// whose lease it holds and claims those nobody holds that have events to
// deliver. What a node knows of its deliveries (the recent attempts, the
// endpoint's state, its lag: stats.go) is kept in memory on that node.
// Endpoints may not name loopback, link-local or private addresses unless
// Config.AllowPrivate says so: the check is made at registration and at
// every connection (client.go).
package webhook

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/sparkles-dev/sparkles/sandbox"
)

// Endpoint is one registered receiver. Secret signs every delivery and is
// part of no answer after the one that created it.
type Endpoint struct {
	ID          string         `json:"id"`
	URL         string         `json:"url"`
	Events      []sandbox.Type `json:"events"`
	SandboxID   string         `json:"sandbox_id,omitempty"`
	Description string         `json:"description,omitempty"`
	Secret      string         `json:"secret"`
	Enabled     bool           `json:"enabled"`
	// DisabledReason says why deliveries stopped, when they did on their own.
	DisabledReason string    `json:"disabled_reason,omitempty"`
	CreatedAt      time.Time `json:"created_at"`
}

// DefaultEvents are the types an endpoint receives when it names none.
var DefaultEvents = sandbox.DefaultWebhookEvents

// wants reports whether the endpoint receives events of type t from
// sandbox sandboxID.
func (ep *Endpoint) wants(sandboxID string, t sandbox.Type) bool {
	if ep.SandboxID != "" && ep.SandboxID != sandboxID {
		return false
	}
	events := ep.Events
	if len(events) == 0 {
		events = DefaultEvents
	}
	return slices.Contains(events, t)
}

// NewSecret returns a fresh signing secret in the Standard Webhooks
// format: "whsec_" and 32 random bytes in base64.
func NewSecret() string {
	key := make([]byte, 32)
	_, _ = rand.Read(key) // crypto/rand.Read does not fail
	return "whsec_" + base64.StdEncoding.EncodeToString(key)
}

// Store keeps endpoints and their cursors durably. Records are the
// endpoints' JSON, opaque to the store, so a store needs nothing of this
// package. boltstore implements it.
type Store interface {
	// PutWebhook creates endpoint id or replaces its record, keeping its cursors.
	PutWebhook(ctx context.Context, id string, endpoint []byte) error
	// Webhook returns the record of endpoint id; not_found when there is none.
	Webhook(ctx context.Context, id string) ([]byte, error)
	// Webhooks returns every endpoint's record, in id order.
	Webhooks(ctx context.Context) ([][]byte, error)
	// DeleteWebhook removes endpoint id and its cursors.
	DeleteWebhook(ctx context.Context, id string) error
	// WebhookCursors returns the cursors of endpoint id by sandbox id.
	WebhookCursors(ctx context.Context, id string) (map[string]uint64, error)
	// SetWebhookCursor records that endpoint id is done with sandboxID's
	// log through event after; not_found once the endpoint is deleted.
	SetWebhookCursor(ctx context.Context, id, sandboxID string, after uint64) error
}

// Log is what deliveries read of the event store (sandbox.Store).
type Log interface {
	Sandbox(ctx context.Context, id string) (sandbox.Sandbox, error)
	Sandboxes(ctx context.Context, after string, limit int) ([]sandbox.Sandbox, bool, error)
	Head(id string) (sandbox.Head, error)
	Read(ctx context.Context, id string, after uint64, limit int) ([]sandbox.Record, error)
	Wait(id string) <-chan struct{}
}

// Put stores ep.
func Put(ctx context.Context, st Store, ep Endpoint) error {
	b, err := json.Marshal(ep)
	if err != nil {
		return err
	}
	return st.PutWebhook(ctx, ep.ID, b)
}

// Get returns endpoint id.
func Get(ctx context.Context, st Store, id string) (Endpoint, error) {
	b, err := st.Webhook(ctx, id)
	if err != nil {
		return Endpoint{}, err
	}
	return decode(b)
}

// List returns every endpoint, in id order.
func List(ctx context.Context, st Store) ([]Endpoint, error) {
	recs, err := st.Webhooks(ctx)
	if err != nil {
		return nil, err
	}
	eps := make([]Endpoint, 0, len(recs))
	for _, b := range recs {
		ep, err := decode(b)
		if err != nil {
			return nil, err
		}
		eps = append(eps, ep)
	}
	return eps, nil
}

func decode(b []byte) (Endpoint, error) {
	var ep Endpoint
	if err := json.Unmarshal(b, &ep); err != nil {
		return Endpoint{}, fmt.Errorf("decode webhook endpoint: %w", err)
	}
	return ep, nil
}
