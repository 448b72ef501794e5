package webhook

import (
	"context"
	"errors"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/sparkles-dev/sparkles/sandbox"
)

// The API of the endpoints (docs/webhooks.md): Loop implements
// server.Webhooks. Every change is stored first and then kicks the loop,
// which starts, stops or restarts the endpoint's deliveries.

// Bounds of what an endpoint's record holds.
const (
	maxURL         = 2048
	maxDescription = 1024
	resolveTimeout = 5 * time.Second
	retryTimeout   = time.Minute
)

func invalid(format string, args ...any) error {
	return sandbox.Errorf(sandbox.EInvalidRequest, format, args...)
}

// CreateWebhook registers an endpoint and answers it with its secret.
func (l *Loop) CreateWebhook(ctx context.Context, p sandbox.WebhookParams) (sandbox.CreatedWebhook, error) {
	u, err := l.checkURL(ctx, p.URL)
	if err != nil {
		return sandbox.CreatedWebhook{}, err
	}
	events, err := checkEvents(p.Events)
	if err != nil {
		return sandbox.CreatedWebhook{}, err
	}
	if len(p.Description) > maxDescription {
		return sandbox.CreatedWebhook{}, invalid("description is longer than %d bytes", maxDescription)
	}
	if p.SandboxID != "" {
		if _, err := l.cfg.Log.Sandbox(ctx, p.SandboxID); err != nil {
			if sandbox.IsType(err, sandbox.ENotFound) {
				return sandbox.CreatedWebhook{}, invalid("sandbox_id: sandbox %s not found", p.SandboxID)
			}
			return sandbox.CreatedWebhook{}, err
		}
	}
	ep := Endpoint{ID: sandbox.NewID("wh_"), URL: u, Events: events, SandboxID: p.SandboxID,
		Description: p.Description, Secret: NewSecret(), Enabled: true, CreatedAt: l.cfg.Now().UTC()}
	if err := Put(ctx, l.cfg.Store, ep); err != nil {
		return sandbox.CreatedWebhook{}, err
	}
	l.Kick()
	return sandbox.CreatedWebhook{Webhook: l.view(ep), Secret: ep.Secret}, nil
}

// Webhook answers endpoint id.
func (l *Loop) Webhook(ctx context.Context, id string) (sandbox.Webhook, error) {
	ep, err := Get(ctx, l.cfg.Store, id)
	if err != nil {
		return sandbox.Webhook{}, err
	}
	return l.view(ep), nil
}

// Webhooks answers every endpoint, in creation order.
func (l *Loop) Webhooks(ctx context.Context) ([]sandbox.Webhook, error) {
	eps, err := List(ctx, l.cfg.Store)
	if err != nil {
		return nil, err
	}
	out := make([]sandbox.Webhook, len(eps))
	for i, ep := range eps {
		out[i] = l.view(ep)
	}
	return out, nil
}

// UpdateWebhook changes endpoint id. Enabling it clears the reason it
// was disabled for; its deliveries resume from its cursors.
func (l *Loop) UpdateWebhook(ctx context.Context, id string, p sandbox.WebhookPatch) (sandbox.Webhook, error) {
	ep, err := Get(ctx, l.cfg.Store, id)
	if err != nil {
		return sandbox.Webhook{}, err
	}
	if p.URL != nil {
		if ep.URL, err = l.checkURL(ctx, *p.URL); err != nil {
			return sandbox.Webhook{}, err
		}
	}
	if p.Events != nil {
		if ep.Events, err = checkEvents(p.Events); err != nil {
			return sandbox.Webhook{}, err
		}
	}
	if p.Description != nil {
		if len(*p.Description) > maxDescription {
			return sandbox.Webhook{}, invalid("description is longer than %d bytes", maxDescription)
		}
		ep.Description = *p.Description
	}
	if p.Enabled != nil {
		ep.Enabled = *p.Enabled
		if ep.Enabled {
			ep.DisabledReason = ""
		}
	}
	if err := Put(ctx, l.cfg.Store, ep); err != nil {
		return sandbox.Webhook{}, err
	}
	l.Kick()
	return l.view(ep), nil
}

// DeleteWebhook removes endpoint id and its cursors, and answers it as it was.
func (l *Loop) DeleteWebhook(ctx context.Context, id string) (sandbox.Webhook, error) {
	ep, err := Get(ctx, l.cfg.Store, id)
	if err != nil {
		return sandbox.Webhook{}, err
	}
	w := l.view(ep)
	if err := l.cfg.Store.DeleteWebhook(ctx, id); err != nil {
		return sandbox.Webhook{}, err
	}
	l.Kick()
	return w, nil
}

// RotateWebhookSecret gives endpoint id a new secret, which signs every
// attempt from now on; the old one signs nothing more.
func (l *Loop) RotateWebhookSecret(ctx context.Context, id string) (sandbox.CreatedWebhook, error) {
	ep, err := Get(ctx, l.cfg.Store, id)
	if err != nil {
		return sandbox.CreatedWebhook{}, err
	}
	ep.Secret = NewSecret()
	signer, err := standardwebhooks.NewWebhook(ep.Secret)
	if err != nil {
		return sandbox.CreatedWebhook{}, err
	}
	if err := Put(ctx, l.cfg.Store, ep); err != nil {
		return sandbox.CreatedWebhook{}, err
	}
	// Every attempt from now on signs with the new secret, before the
	// loop restarts the endpoint's deliveries on its new record.
	l.mu.Lock()
	l.rotated[id] = rotation{secret: ep.Secret, signer: signer}
	l.mu.Unlock()
	l.Kick()
	return sandbox.CreatedWebhook{Webhook: l.view(ep), Secret: ep.Secret}, nil
}

// WebhookDeliveries answers endpoint id's recent attempts on this node,
// newest first.
func (l *Loop) WebhookDeliveries(ctx context.Context, id string) ([]sandbox.WebhookDelivery, error) {
	if _, err := l.cfg.Store.Webhook(ctx, id); err != nil {
		return nil, err
	}
	return l.deliveries(id), nil
}

// RetryWebhookDelivery attempts a delivery now. An event a worker of this
// node is waiting to try again is tried at once by that worker, which
// goes on in order when it succeeds; any other event of the log (one
// delivered already, or held by a disabled endpoint) is sent once more,
// and the cursor stays where it is.
func (l *Loop) RetryWebhookDelivery(ctx context.Context, id, delivery string) (sandbox.WebhookDelivery, error) {
	ep, err := Get(ctx, l.cfg.Store, id)
	if err != nil {
		return sandbox.WebhookDelivery{}, err
	}
	sandboxID, eventID, ok := parseDelivery(id, delivery)
	if !ok {
		return sandbox.WebhookDelivery{}, sandbox.Errorf(sandbox.ENotFound,
			"delivery %s not found: a delivery's id is its webhook-id, %s_<sandbox id>_<event id>", delivery, id)
	}
	ctx, cancel := context.WithTimeout(ctx, retryTimeout)
	defer cancel()
	if ch := l.wakeWorker(id, sandboxID, eventID, delivery); ch != nil {
		select {
		case d := <-ch:
			return d, nil
		case <-ctx.Done():
			return sandbox.WebhookDelivery{}, sandbox.Errorf(sandbox.EUnavailable, "the retry of %s did not end within %s", delivery, retryTimeout)
		}
	}
	recs, err := l.cfg.Log.Read(ctx, sandboxID, eventID-1, 1)
	if err != nil {
		if sandbox.IsType(err, sandbox.ECursorPruned) || sandbox.IsType(err, sandbox.ECursorStale) {
			return sandbox.WebhookDelivery{}, sandbox.Errorf(sandbox.ENotFound, "event %d of sandbox %s is not in its log (pruned, or not written yet)", eventID, sandboxID)
		}
		return sandbox.WebhookDelivery{}, err
	}
	if len(recs) == 0 || recs[0].ID != eventID {
		return sandbox.WebhookDelivery{}, sandbox.Errorf(sandbox.ENotFound, "event %d of sandbox %s is not in its log", eventID, sandboxID)
	}
	body, err := Body(recs[0])
	if err != nil {
		return sandbox.WebhookDelivery{}, err
	}
	signer, err := standardwebhooks.NewWebhook(ep.Secret)
	if err != nil {
		return sandbox.WebhookDelivery{}, err
	}
	a := post(ctx, l.cfg.Client, &ep, signer, l.cfg.Now(), sandboxID, recs[0], body)
	a.N = l.attempts(id, delivery) + 1
	l.record(a)
	return a.Delivery(), nil
}

// wakeWorker wakes the worker waiting to retry eventID of sandboxID and
// returns where its next attempt is told; nil when no worker waits on it.
func (l *Loop) wakeWorker(id, sandboxID string, eventID uint64, delivery string) chan sandbox.WebhookDelivery {
	l.mu.Lock()
	defer l.mu.Unlock()
	st := l.stats[id]
	if st == nil {
		return nil
	}
	p := st.pending[sandboxID]
	if p == nil || p.eventID != eventID {
		return nil
	}
	ch := make(chan sandbox.WebhookDelivery, 1)
	st.waiters[delivery] = append(st.waiters[delivery], ch)
	select {
	case p.wake <- struct{}{}:
	default:
	}
	return ch
}

// parseDelivery splits a delivery id of endpoint id, the webhook-id
// "<endpoint>_<sandbox>_<event>".
func parseDelivery(id, delivery string) (sandboxID string, eventID uint64, ok bool) {
	rest, ok := strings.CutPrefix(delivery, id+"_")
	if !ok {
		return "", 0, false
	}
	i := strings.LastIndexByte(rest, '_')
	if i <= 0 {
		return "", 0, false
	}
	eventID, err := strconv.ParseUint(rest[i+1:], 10, 64)
	if err != nil || eventID == 0 {
		return "", 0, false
	}
	return rest[:i], eventID, true
}

// view is endpoint ep as the API answers it: no secret.
func (l *Loop) view(ep Endpoint) sandbox.Webhook {
	events := ep.Events
	if len(events) == 0 {
		events = DefaultEvents
	}
	stats, state := l.figures(ep)
	return sandbox.Webhook{Object: "webhook", ID: ep.ID, URL: ep.URL, Events: slices.Clone(events),
		SandboxID: ep.SandboxID, Description: ep.Description, Enabled: ep.Enabled, State: state,
		DisabledReason: ep.DisabledReason, CreatedAt: ep.CreatedAt.UTC(), Stats: stats}
}

// checkEvents checks that each type is durable, and drops repeats.
func checkEvents(types []sandbox.Type) ([]sandbox.Type, error) {
	if len(types) == 0 {
		return slices.Clone(DefaultEvents), nil
	}
	var out []sandbox.Type
	for _, t := range types {
		if !t.Durable() {
			return nil, invalid("events: %q is not a durable event type; one of %s", t, typeList())
		}
		if !slices.Contains(out, t) {
			out = append(out, t)
		}
	}
	return out, nil
}

func typeList() string {
	names := make([]string, len(sandbox.DurableTypes))
	for i, t := range sandbox.DurableTypes {
		names[i] = string(t)
	}
	return strings.Join(names, ", ")
}

// checkURL checks an endpoint's URL: absolute http or https, with a host,
// and, unless private addresses are allowed, a host that is no private
// address and resolves to none now (the delivery client checks again at
// every connection). A name that does not resolve yet is accepted.
func (l *Loop) checkURL(ctx context.Context, raw string) (string, error) {
	if raw == "" {
		return "", invalid("url is required: the endpoint that receives the POSTs")
	}
	if len(raw) > maxURL {
		return "", invalid("url is longer than %d bytes", maxURL)
	}
	u, err := url.Parse(raw)
	if err != nil {
		return "", invalid("url %q is not a URL: %v", raw, errors.Unwrap(err))
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return "", invalid("url %q: only http and https endpoints are delivered to", raw)
	}
	if u.Host == "" || u.Hostname() == "" {
		return "", invalid("url %q has no host", raw)
	}
	if u.User != nil {
		return "", invalid("url %q: credentials in the URL are not kept; authenticate deliveries by their signature", raw)
	}
	if u.Fragment != "" {
		return "", invalid("url %q: a fragment is never sent", raw)
	}
	if l.cfg.AllowPrivate {
		return u.String(), nil
	}
	host := u.Hostname()
	if addr, err := netip.ParseAddr(host); err == nil {
		if refused(addr) {
			return "", privateURL(raw, addr)
		}
		return u.String(), nil
	}
	rctx, cancel := context.WithTimeout(ctx, resolveTimeout)
	defer cancel()
	addrs, err := l.cfg.Resolver.LookupNetIP(rctx, "ip", host)
	if err != nil {
		return u.String(), nil
	}
	for _, a := range addrs {
		if refused(a) {
			return "", privateURL(raw, a)
		}
	}
	return u.String(), nil
}

func privateURL(raw string, a netip.Addr) error {
	return invalid("url %q: %s is a loopback, link-local or private address, which deliveries do not reach unless the server runs with --webhook-allow-private (local development)", raw, a.Unmap())
}
