package client

import (
	"context"
	"net/http"

	"github.com/sparkles-dev/sparkles/sandbox"
)

// The webhook calls (docs/webhooks.md) need the server token: an endpoint's
// URL and its deliveries speak of every sandbox.

// CreateWebhook registers an endpoint. The answer carries its signing
// secret, which no later answer but a rotation's shows again. A URL that is
// not http(s), an unknown or non-durable event type, an unknown sandbox or,
// unless the server allows it, a private or loopback host is
// ErrInvalidRequest.
func (c *Client) CreateWebhook(ctx context.Context, p sandbox.WebhookParams) (sandbox.CreatedWebhook, error) {
	var out sandbox.CreatedWebhook
	err := c.call(ctx, http.MethodPost, c.endpoint(nil, "v1", "webhooks"), p, http.StatusCreated, &out)
	return out, err
}

// ListWebhooks returns every endpoint, without their secrets.
func (c *Client) ListWebhooks(ctx context.Context) ([]sandbox.Webhook, error) {
	var out struct {
		Data []sandbox.Webhook `json:"data"`
	}
	err := c.call(ctx, http.MethodGet, c.endpoint(nil, "v1", "webhooks"), nil, http.StatusOK, &out)
	return out.Data, err
}

// GetWebhook returns an endpoint with its state and delivery figures.
func (c *Client) GetWebhook(ctx context.Context, id string) (sandbox.Webhook, error) {
	var out sandbox.Webhook
	err := c.call(ctx, http.MethodGet, c.endpoint(nil, "v1", "webhooks", id), nil, http.StatusOK, &out)
	return out, err
}

// UpdateWebhook changes an endpoint's URL, events, description or whether
// it is enabled; enabling one clears its disabled reason.
func (c *Client) UpdateWebhook(ctx context.Context, id string, p sandbox.WebhookPatch) (sandbox.Webhook, error) {
	var out sandbox.Webhook
	err := c.call(ctx, http.MethodPatch, c.endpoint(nil, "v1", "webhooks", id), p, http.StatusOK, &out)
	return out, err
}

// DeleteWebhook removes an endpoint and answers it as it was.
func (c *Client) DeleteWebhook(ctx context.Context, id string) (sandbox.Webhook, error) {
	var out sandbox.Webhook
	err := c.call(ctx, http.MethodDelete, c.endpoint(nil, "v1", "webhooks", id), nil, http.StatusOK, &out)
	return out, err
}

// RotateWebhookSecret gives an endpoint a new signing secret, answered
// this once; the old one signs nothing more.
func (c *Client) RotateWebhookSecret(ctx context.Context, id string) (sandbox.CreatedWebhook, error) {
	var out sandbox.CreatedWebhook
	err := c.call(ctx, http.MethodPost, c.endpoint(nil, "v1", "webhooks", id, "rotate-secret"), nil, http.StatusOK, &out)
	return out, err
}

// WebhookDeliveries returns the answering node's recent attempts to
// deliver to an endpoint, newest first.
func (c *Client) WebhookDeliveries(ctx context.Context, id string) ([]sandbox.WebhookDelivery, error) {
	var out struct {
		Data []sandbox.WebhookDelivery `json:"data"`
	}
	err := c.call(ctx, http.MethodGet, c.endpoint(nil, "v1", "webhooks", id, "deliveries"), nil, http.StatusOK, &out)
	return out.Data, err
}

// RetryWebhookDelivery attempts once more, now, the event of a delivery
// (deliveryID is its webhook-id) and answers that attempt.
func (c *Client) RetryWebhookDelivery(ctx context.Context, id, deliveryID string) (sandbox.WebhookDelivery, error) {
	var out sandbox.WebhookDelivery
	err := c.call(ctx, http.MethodPost, c.endpoint(nil, "v1", "webhooks", id, "deliveries", deliveryID, "retry"), nil, http.StatusOK, &out)
	return out, err
}
