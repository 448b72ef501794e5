package webhook

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/sparkles-dev/sparkles/sandbox"
)

// Bounds of what a delivery reads of a response: up to readLimit bytes
// are drained so the connection can be reused, and the first excerptLimit
// are kept for the attempt's record.
const (
	readLimit    = 64 << 10
	excerptLimit = 256
)

// Attempt is one POST of an event to an endpoint.
type Attempt struct {
	Endpoint  string
	SandboxID string
	EventID   uint64
	Type      sandbox.Type
	N         int    // 1 for the first attempt of the event
	WebhookID string // the webhook-id header: the same for every attempt of the event
	At        time.Time
	Status    int // the response's status code, 0 when there was none
	Duration  time.Duration
	Err       string    // why the attempt failed, "" when the receiver answered 2xx
	Excerpt   string    // the start of the response body
	Next      time.Time // when the next attempt is due, zero when none is
}

// OK reports whether the receiver took the event.
func (a Attempt) OK() bool { return a.Err == "" }

// Delivery is the attempt as the API answers it.
func (a Attempt) Delivery() sandbox.WebhookDelivery {
	d := sandbox.WebhookDelivery{Object: "webhook_delivery", ID: a.WebhookID, SandboxID: a.SandboxID,
		EventID: sandbox.Seq(a.EventID), Type: a.Type, Attempt: a.N, At: a.At.UTC(), StatusCode: a.Status,
		DurationMS: a.Duration.Milliseconds(), Error: a.Err, Response: a.Excerpt}
	if !a.Next.IsZero() {
		next := a.Next.UTC()
		d.NextAttemptAt = &next
	}
	return d
}

// WebhookID is the webhook-id of an event for an endpoint: stable across
// attempts and restarts, so receivers deduplicate on it.
func WebhookID(endpointID, sandboxID string, eventID uint64) string {
	return endpointID + "_" + sandboxID + "_" + sandbox.FormatID(eventID)
}

// envelope is the stored event JSON, its fields kept as they were served.
type envelope struct {
	ID        json.RawMessage `json:"id"`
	Type      json.RawMessage `json:"type"`
	TS        json.RawMessage `json:"ts"`
	SandboxID json.RawMessage `json:"sandbox_id"`
	TurnID    json.RawMessage `json:"turn_id"`
	Data      json.RawMessage `json:"data"`
}

// Body returns the delivery body of a stored event: {type, id, sandbox_id,
// turn_id, ts, data}, every value the bytes the stream serves, so nothing
// in it escapes the curation the log already applied.
func Body(rec sandbox.Record) ([]byte, error) {
	var e envelope
	if err := json.Unmarshal(rec.JSON, &e); err != nil {
		return nil, fmt.Errorf("decode event %d: %w", rec.ID, err)
	}
	var b bytes.Buffer
	b.Grow(len(rec.JSON))
	for i, f := range []struct {
		name string
		v    json.RawMessage
	}{{"type", e.Type}, {"id", e.ID}, {"sandbox_id", e.SandboxID}, {"turn_id", e.TurnID}, {"ts", e.TS}, {"data", e.Data}} {
		if i == 0 {
			b.WriteByte('{')
		} else {
			b.WriteByte(',')
		}
		b.WriteString(`"` + f.name + `":`)
		if len(f.v) == 0 {
			b.WriteString("null")
		} else {
			b.Write(f.v)
		}
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// eventTime returns the ts of a stored event.
func eventTime(rec sandbox.Record) (time.Time, error) {
	var e struct {
		TS time.Time `json:"ts"`
	}
	err := json.Unmarshal(rec.JSON, &e)
	return e.TS, err
}

// post makes one attempt to deliver body, the event rec of sandboxID, to ep.
func post(ctx context.Context, client *http.Client, ep *Endpoint, signer *standardwebhooks.Webhook, now time.Time, sandboxID string, rec sandbox.Record, body []byte) Attempt {
	a := Attempt{Endpoint: ep.ID, SandboxID: sandboxID, EventID: rec.ID, Type: rec.Type, WebhookID: WebhookID(ep.ID, sandboxID, rec.ID), At: now}
	sig, err := signer.Sign(a.WebhookID, now, body)
	if err != nil {
		a.Err = "sign: " + err.Error()
		return a
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, ep.URL, bytes.NewReader(body))
	if err != nil {
		a.Err = err.Error()
		return a
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "sparkles-webhooks")
	req.Header.Set(standardwebhooks.HeaderWebhookID, a.WebhookID)
	req.Header.Set(standardwebhooks.HeaderWebhookTimestamp, fmt.Sprint(now.Unix()))
	req.Header.Set(standardwebhooks.HeaderWebhookSignature, sig)
	start := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		a.Duration = time.Since(start)
		a.Err = err.Error()
		return a
	}
	excerpt := make([]byte, excerptLimit)
	n, _ := io.ReadFull(resp.Body, excerpt)
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, readLimit-excerptLimit))
	_ = resp.Body.Close()
	a.Duration = time.Since(start)
	a.Status, a.Excerpt = resp.StatusCode, string(excerpt[:n])
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		a.Err = "the receiver answered " + resp.Status
	}
	return a
}
