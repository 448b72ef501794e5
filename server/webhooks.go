package server

import (
	"context"
	"net/http"

	"github.com/julienschmidt/httprouter"

	"github.com/sparkles-dev/sparkles/sandbox"
)

// Webhooks keeps the webhook endpoints and runs their deliveries
// (docs/webhooks.md); internal/webhook's Loop is the implementation.
// Errors are *sandbox.Error where they are part of the contract:
// not_found for an unknown endpoint or delivery, invalid_request for a
// bad URL, event type or sandbox.
type Webhooks interface {
	CreateWebhook(ctx context.Context, p sandbox.WebhookParams) (sandbox.CreatedWebhook, error)
	Webhook(ctx context.Context, id string) (sandbox.Webhook, error)
	Webhooks(ctx context.Context) ([]sandbox.Webhook, error)
	UpdateWebhook(ctx context.Context, id string, p sandbox.WebhookPatch) (sandbox.Webhook, error)
	DeleteWebhook(ctx context.Context, id string) (sandbox.Webhook, error)
	// RotateWebhookSecret gives the endpoint a new secret; the old one
	// signs nothing more.
	RotateWebhookSecret(ctx context.Context, id string) (sandbox.CreatedWebhook, error)
	// WebhookDeliveries are the endpoint's recent attempts, newest first.
	WebhookDeliveries(ctx context.Context, id string) ([]sandbox.WebhookDelivery, error)
	// RetryWebhookDelivery attempts the delivery named by its webhook-id
	// now and answers the attempt.
	RetryWebhookDelivery(ctx context.Context, id, delivery string) (sandbox.WebhookDelivery, error)
}

type webhookList struct {
	Object string            `json:"object"`
	Data   []sandbox.Webhook `json:"data"`
}

type deliveryList struct {
	Object string                    `json:"object"`
	Data   []sandbox.WebhookDelivery `json:"data"`
}

// webhookRoutes are the routes of /v1/webhooks, every one for the full
// token only: an endpoint's URL and its deliveries speak of every sandbox.
func (s *Server) webhookRoutes() []route {
	if s.cfg.Webhooks == nil {
		return nil
	}
	return []route{
		{http.MethodPost, "/v1/webhooks", accessFull, s.createWebhook},
		{http.MethodGet, "/v1/webhooks", accessFull, s.listWebhooks},
		{http.MethodGet, "/v1/webhooks/:id", accessFull, s.getWebhook},
		{http.MethodPatch, "/v1/webhooks/:id", accessFull, s.patchWebhook},
		{http.MethodDelete, "/v1/webhooks/:id", accessFull, s.deleteWebhook},
		{http.MethodPost, "/v1/webhooks/:id/rotate-secret", accessFull, s.rotateWebhook},
		{http.MethodGet, "/v1/webhooks/:id/deliveries", accessFull, s.webhookDeliveries},
		{http.MethodPost, "/v1/webhooks/:id/deliveries/:delivery/retry", accessFull, s.retryWebhookDelivery},
	}
}

func (s *Server) createWebhook(w http.ResponseWriter, r *http.Request, _ httprouter.Params) error {
	var p sandbox.WebhookParams
	if err := decodeBody(w, r, &p); err != nil {
		return err
	}
	wh, err := s.cfg.Webhooks.CreateWebhook(r.Context(), p)
	if err != nil {
		return err
	}
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusCreated, wh)
	return nil
}

func (s *Server) listWebhooks(w http.ResponseWriter, r *http.Request, _ httprouter.Params) error {
	list, err := s.cfg.Webhooks.Webhooks(r.Context())
	if err != nil {
		return err
	}
	if list == nil {
		list = []sandbox.Webhook{}
	}
	writeJSON(w, http.StatusOK, webhookList{Object: "list", Data: list})
	return nil
}

func (s *Server) getWebhook(w http.ResponseWriter, r *http.Request, ps httprouter.Params) error {
	wh, err := s.cfg.Webhooks.Webhook(r.Context(), ps.ByName("id"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, wh)
	return nil
}

func (s *Server) patchWebhook(w http.ResponseWriter, r *http.Request, ps httprouter.Params) error {
	var p sandbox.WebhookPatch
	if err := decodeBody(w, r, &p); err != nil {
		return err
	}
	wh, err := s.cfg.Webhooks.UpdateWebhook(r.Context(), ps.ByName("id"), p)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, wh)
	return nil
}

func (s *Server) deleteWebhook(w http.ResponseWriter, r *http.Request, ps httprouter.Params) error {
	wh, err := s.cfg.Webhooks.DeleteWebhook(r.Context(), ps.ByName("id"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, wh)
	return nil
}

func (s *Server) rotateWebhook(w http.ResponseWriter, r *http.Request, ps httprouter.Params) error {
	if err := decodeBody(w, r, &struct{}{}); err != nil { // no fields: a body that names one is a mistake
		return err
	}
	wh, err := s.cfg.Webhooks.RotateWebhookSecret(r.Context(), ps.ByName("id"))
	if err != nil {
		return err
	}
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, wh)
	return nil
}

func (s *Server) webhookDeliveries(w http.ResponseWriter, r *http.Request, ps httprouter.Params) error {
	list, err := s.cfg.Webhooks.WebhookDeliveries(r.Context(), ps.ByName("id"))
	if err != nil {
		return err
	}
	if list == nil {
		list = []sandbox.WebhookDelivery{}
	}
	writeJSON(w, http.StatusOK, deliveryList{Object: "list", Data: list})
	return nil
}

func (s *Server) retryWebhookDelivery(w http.ResponseWriter, r *http.Request, ps httprouter.Params) error {
	if err := decodeBody(w, r, &struct{}{}); err != nil { // no fields: a body that names one is a mistake
		return err
	}
	d, err := s.cfg.Webhooks.RetryWebhookDelivery(r.Context(), ps.ByName("id"), ps.ByName("delivery"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, d)
	return nil
}
