package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	"github.com/urfave/cli/v2"

	"github.com/sparkles-dev/sparkles/sandbox"
)

// Bounds of the listen receiver: a delivery's body is one event of the log
// (far below maxDeliveryBody); a forward target's answer is passed back up
// to the size the server reads of any answer; a forward gets the server's
// own whole-request timeout, past which the server gives up anyway.
const (
	maxDeliveryBody  = 16 << 20
	maxForwardAnswer = 64 << 10
	forwardTimeout   = 30 * time.Second
)

func newWebhooksListenCommand() *cli.Command {
	return &cli.Command{
		Name:  "listen",
		Usage: "receive deliveries here: register an endpoint served on 127.0.0.1, print each verified delivery, remove the endpoint on exit",
		Description: "Serves a receiver on a random port of 127.0.0.1 and registers it as an endpoint, whose secret it\n" +
			"prints on stderr. Each delivery's signature is checked: a verified one is printed as one line (the\n" +
			"event's time, type, sandbox, id and turn; --json prints its body) and, with --forward, passed on\n" +
			"with its body and webhook-* headers, answering what the target answered (502 when it cannot be\n" +
			"reached); a bad signature is answered 401 and warned of. Interrupting it removes the endpoint.\n" +
			"The server must run with --webhook-allow-private to deliver to a loopback address.",
		Flags: clientFlags(
			webhookEventFlag("event types to receive (repeatable; default turn.completed, approval.requested, sandbox.error)"),
			webhookSandboxFlag("receive only the events of this sandbox (default: every sandbox)"),
			&cli.StringFlag{Name: "forward", EnvVars: []string{"SPARKLES_WEBHOOK_FORWARD"}, Usage: "pass each verified delivery on to this URL (e.g. your app's receiver on http://127.0.0.1:3000/hooks)"},
			&cli.BoolFlag{Name: "json", EnvVars: []string{"SPARKLES_JSON"}, Usage: "print each verified delivery's body, one line each"},
		),
		Action: runWebhooksListen,
	}
}

func runWebhooksListen(c *cli.Context) (err error) {
	if _, err := positional(c, 0, 0); err != nil {
		return err
	}
	forward := c.String("forward")
	if forward != "" {
		if err := checkHTTPURL("--forward", forward); err != nil {
			return err
		}
	}
	api, err := newAPIClient(c)
	if err != nil {
		return err
	}
	ctx, stop := signalContext(c.Context)
	defer stop()
	errw := &lockedWriter{w: c.App.ErrWriter}

	// Listen first, so the URL registered is one that answers.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("listen on 127.0.0.1: %w", err)
	}
	defer ln.Close()
	recvURL := "http://" + ln.Addr().String() + "/"
	wh, err := api.CreateWebhook(ctx, sandbox.WebhookParams{
		URL:         recvURL,
		Events:      eventTypes(c.StringSlice("event")),
		SandboxID:   c.String("sandbox"),
		Description: "sparkles webhooks listen",
	})
	if refusesPrivate(err) {
		return fmt.Errorf("the server at %s does not deliver to loopback addresses, where listen receives: it must run with --webhook-allow-private (for local development)", api.url)
	}
	if err != nil {
		return describeWebhook(api, err)
	}
	// From here on every way out removes the endpoint, with a context of
	// its own: the one that ended the listen is done.
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if _, derr := api.DeleteWebhook(dctx, wh.ID); derr != nil {
			derr = fmt.Errorf("the endpoint %s could not be removed (%v); remove it with `sparkles webhooks delete %s`", wh.ID, describeWebhook(api, derr), wh.ID)
			err = errors.Join(err, derr)
			return
		}
		fmt.Fprintf(errw, "removed the endpoint %s\n", wh.ID)
	}()

	verifier, err := standardwebhooks.NewWebhook(wh.Secret)
	if err != nil {
		return fmt.Errorf("the signing secret of %s: %w", wh.ID, err)
	}
	l := &receiver{
		out:     &lockedWriter{w: c.App.Writer},
		errw:    errw,
		verify:  verifier,
		json:    c.Bool("json"),
		forward: forward,
		hc: &http.Client{
			Timeout: forwardTimeout,
			// The target's answer is passed back as it is, a redirect
			// too, as the server would take it.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
	}
	to := ""
	if forward != "" {
		to = ", forwarded to " + forward
	}
	// Said before serving: the first delivery's line comes after it.
	fmt.Fprintf(errw, "Listening on %s as the endpoint %s (%s)%s.\nIts signing secret is %s\nCtrl-C removes the endpoint.\n",
		recvURL, wh.ID, eventList(wh.Events), to, wh.Secret)
	srv := &http.Server{Handler: l, ReadHeaderTimeout: 10 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()

	select {
	case <-ctx.Done():
	case err = <-served:
		err = fmt.Errorf("the receiver on %s stopped: %w", recvURL, err)
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if srv.Shutdown(sctx) != nil {
		_ = srv.Close()
	}
	return err
}

// receiver is the HTTP handler of listen: it verifies, prints and forwards
// each delivery.
type receiver struct {
	out, errw io.Writer
	verify    *standardwebhooks.Webhook
	json      bool
	forward   string
	hc        *http.Client
}

// webhookHeaders are the headers a delivery is signed with, passed on by
// a forward so the target can verify it with the same secret.
var webhookHeaders = []string{standardwebhooks.HeaderWebhookID, standardwebhooks.HeaderWebhookTimestamp, standardwebhooks.HeaderWebhookSignature}

func (l *receiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, "deliveries are POSTed", http.StatusMethodNotAllowed)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxDeliveryBody))
	if err != nil {
		http.Error(w, "the body could not be read", http.StatusBadRequest)
		return
	}
	if err := l.verify.Verify(body, r.Header); err != nil {
		fmt.Fprintf(l.errw, "warning: refused a request from %s with a bad signature (%v); answered 401\n", r.RemoteAddr, err)
		http.Error(w, "bad signature", http.StatusUnauthorized)
		return
	}
	if l.forward == "" {
		l.print(body, "")
		w.WriteHeader(http.StatusNoContent)
		return
	}
	status, header, answer, err := l.pass(r.Context(), r.Header, body)
	if err != nil {
		l.print(body, "→ unreachable")
		fmt.Fprintf(l.errw, "warning: could not forward to %s (%v); answered 502\n", l.forward, err)
		http.Error(w, "the forward target could not be reached", http.StatusBadGateway)
		return
	}
	l.print(body, fmt.Sprintf("→ %d", status))
	if ct := header.Get("Content-Type"); ct != "" {
		w.Header().Set("Content-Type", ct)
	}
	w.WriteHeader(status)
	_, _ = w.Write(answer)
}

// pass forwards a verified delivery and returns the target's answer.
func (l *receiver) pass(ctx context.Context, in http.Header, body []byte) (int, http.Header, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, l.forward, bytes.NewReader(body))
	if err != nil {
		return 0, nil, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "sparkles-webhooks-listen")
	for _, h := range webhookHeaders {
		req.Header.Set(h, in.Get(h))
	}
	resp, err := l.hc.Do(req)
	if err != nil {
		return 0, nil, nil, err
	}
	defer resp.Body.Close()
	answer, err := io.ReadAll(io.LimitReader(resp.Body, maxForwardAnswer))
	if err != nil {
		return 0, nil, nil, err
	}
	return resp.StatusCode, resp.Header, answer, nil
}

// print writes one verified delivery: its body with --json, else a line
// of the event's time, type, sandbox, id and turn, then what happened to
// it (a forward's status).
func (l *receiver) print(body []byte, outcome string) {
	if l.json {
		var b bytes.Buffer
		if json.Compact(&b, body) != nil {
			b.Reset()
			b.Write(bytes.ReplaceAll(body, []byte("\n"), nil))
		}
		b.WriteByte('\n')
		_, _ = l.out.Write(b.Bytes())
		return
	}
	var d struct {
		Type      string      `json:"type"`
		ID        sandbox.Seq `json:"id"`
		SandboxID string      `json:"sandbox_id"`
		TurnID    string      `json:"turn_id"`
		TS        time.Time   `json:"ts"`
	}
	if err := json.Unmarshal(body, &d); err != nil {
		fmt.Fprintf(l.errw, "warning: a verified delivery is not an event (%v): %s\n", err, cell(string(body), 200))
		return
	}
	fields := []string{formatTime(d.TS), fmt.Sprintf("%-18s", cell(d.Type, 40)), cell(d.SandboxID, 40), "event " + sandbox.FormatID(uint64(d.ID)), orDash(cell(d.TurnID, 40))}
	if outcome != "" {
		fields = append(fields, outcome)
	}
	fmt.Fprintln(l.out, strings.Join(fields, "  "))
}

// lockedWriter lets the receiver's handlers, which run at once, write
// whole lines to one writer.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (w *lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.w.Write(p)
}
