package cli

import (
	"errors"
	"fmt"
	"io"
	"net/url"
	"strings"
	"text/tabwriter"

	"github.com/urfave/cli/v2"

	"github.com/sparkles-dev/sparkles/client"
	"github.com/sparkles-dev/sparkles/sandbox"
)

func newWebhooksCommand() *cli.Command {
	return &cli.Command{
		Name:  "webhooks",
		Usage: "register, list and change the endpoints the server delivers events to, and receive them here with listen",
		Description: "Each endpoint receives a signed POST per matching event (docs/webhooks.md). Its secret is shown\n" +
			"when it is created or rotated, never again. These commands need the server's token.",
		Subcommands: []*cli.Command{
			{
				Name:      "create",
				Usage:     "register an endpoint and print its signing secret, shown this once",
				ArgsUsage: "URL",
				Flags: clientFlags(
					webhookEventFlag("event types to deliver (repeatable; default turn.completed, approval.requested, sandbox.error)"),
					webhookSandboxFlag("deliver only the events of this sandbox (default: every sandbox)"),
					webhookDescriptionFlag(),
					jsonFlag(),
				),
				Action: func(c *cli.Context) error {
					args, err := positional(c, 1, 1)
					if err != nil {
						return err
					}
					wh, err := webhookCall(c, func(api *apiClient) (sandbox.CreatedWebhook, error) {
						return api.CreateWebhook(c.Context, sandbox.WebhookParams{
							URL:         args[0],
							Events:      eventTypes(c.StringSlice("event")),
							SandboxID:   c.String("sandbox"),
							Description: c.String("description"),
						})
					})
					if err != nil {
						return err
					}
					return printCreatedWebhook(c, wh)
				},
			},
			{
				Name:  "list",
				Usage: "list the endpoints with their state and this node's delivery figures",
				Flags: clientFlags(jsonFlag()),
				Action: func(c *cli.Context) error {
					if _, err := positional(c, 0, 0); err != nil {
						return err
					}
					list, err := webhookCall(c, func(api *apiClient) ([]sandbox.Webhook, error) {
						return api.ListWebhooks(c.Context)
					})
					if err != nil {
						return err
					}
					if list == nil {
						list = []sandbox.Webhook{}
					}
					return printAnswer(c, list, printWebhooks)
				},
			},
			{
				Name:      "get",
				Usage:     "show an endpoint: its state, why it was disabled, its delivery figures and last attempt",
				ArgsUsage: "ID",
				Flags:     clientFlags(jsonFlag()),
				Action: func(c *cli.Context) error {
					args, err := positional(c, 1, 1)
					if err != nil {
						return err
					}
					wh, err := webhookCall(c, func(api *apiClient) (sandbox.Webhook, error) {
						return api.GetWebhook(c.Context, args[0])
					})
					if err != nil {
						return err
					}
					return printAnswer(c, wh, printWebhook)
				},
			},
			{
				Name:      "update",
				Usage:     "change an endpoint's URL, events or description, or enable or disable it (enabling resumes where it stopped)",
				ArgsUsage: "ID",
				Flags: clientFlags(
					&cli.StringFlag{Name: "endpoint", EnvVars: []string{"SPARKLES_WEBHOOK_ENDPOINT"}, Usage: "the endpoint's new URL"},
					webhookEventFlag("the event types to deliver from now on, replacing the ones it has (repeatable)"),
					webhookDescriptionFlag(),
					&cli.BoolFlag{Name: "enable", EnvVars: []string{"SPARKLES_WEBHOOK_ENABLE"}, Usage: "enable the endpoint; one disabled after failing resumes from its cursors"},
					&cli.BoolFlag{Name: "disable", EnvVars: []string{"SPARKLES_WEBHOOK_DISABLE"}, Usage: "stop delivering to the endpoint, keeping its cursors"},
					jsonFlag(),
				),
				Action: func(c *cli.Context) error {
					args, err := positional(c, 1, 1)
					if err != nil {
						return err
					}
					p, err := webhookPatch(c)
					if err != nil {
						return err
					}
					wh, err := webhookCall(c, func(api *apiClient) (sandbox.Webhook, error) {
						return api.UpdateWebhook(c.Context, args[0], p)
					})
					if err != nil {
						return err
					}
					return printAnswer(c, wh, printWebhook)
				},
			},
			{
				Name:      "delete",
				Usage:     "remove an endpoint; nothing more is delivered to it",
				ArgsUsage: "ID",
				Flags:     clientFlags(jsonFlag()),
				Action: func(c *cli.Context) error {
					args, err := positional(c, 1, 1)
					if err != nil {
						return err
					}
					wh, err := webhookCall(c, func(api *apiClient) (sandbox.Webhook, error) {
						return api.DeleteWebhook(c.Context, args[0])
					})
					if err != nil {
						return err
					}
					if c.Bool("json") {
						return printJSON(c.App.Writer, wh)
					}
					fmt.Fprintf(c.App.Writer, "deleted %s\n", wh.ID)
					return nil
				},
			},
			{
				Name:      "rotate",
				Usage:     "give an endpoint a new signing secret, shown this once; the old one signs nothing more",
				ArgsUsage: "ID",
				Flags:     clientFlags(jsonFlag()),
				Action: func(c *cli.Context) error {
					args, err := positional(c, 1, 1)
					if err != nil {
						return err
					}
					wh, err := webhookCall(c, func(api *apiClient) (sandbox.CreatedWebhook, error) {
						return api.RotateWebhookSecret(c.Context, args[0])
					})
					if err != nil {
						return err
					}
					return printCreatedWebhook(c, wh)
				},
			},
			{
				Name:      "deliveries",
				Usage:     "list this node's recent attempts to deliver to an endpoint, newest first",
				ArgsUsage: "ID",
				Flags:     clientFlags(jsonFlag()),
				Action: func(c *cli.Context) error {
					args, err := positional(c, 1, 1)
					if err != nil {
						return err
					}
					list, err := webhookCall(c, func(api *apiClient) ([]sandbox.WebhookDelivery, error) {
						return api.WebhookDeliveries(c.Context, args[0])
					})
					if err != nil {
						return err
					}
					if list == nil {
						list = []sandbox.WebhookDelivery{}
					}
					return printAnswer(c, list, printDeliveries)
				},
			},
			{
				Name:      "retry",
				Usage:     "attempt a delivery's event once more, now; exits 1 when the endpoint did not take it",
				ArgsUsage: "ID DELIVERY",
				Flags:     clientFlags(jsonFlag()),
				Action: func(c *cli.Context) error {
					args, err := positional(c, 2, 2)
					if err != nil {
						return err
					}
					d, err := webhookCall(c, func(api *apiClient) (sandbox.WebhookDelivery, error) {
						return api.RetryWebhookDelivery(c.Context, args[0], args[1])
					})
					if err != nil {
						return err
					}
					if c.Bool("json") {
						err = printJSON(c.App.Writer, d)
					} else {
						err = printDeliveries(c.App.Writer, []sandbox.WebhookDelivery{d})
					}
					if err == nil && d.Error != "" {
						return exitCode(1) // the table says why
					}
					return err
				},
			},
			newWebhooksListenCommand(),
		},
	}
}

func webhookEventFlag(usage string) cli.Flag {
	return &cli.StringSliceFlag{Name: "event", EnvVars: []string{"SPARKLES_WEBHOOK_EVENT"}, Usage: usage}
}

func webhookSandboxFlag(usage string) cli.Flag {
	// Not SPARKLES_SANDBOX: that one picks the sandbox the workspace
	// commands act on, and would narrow an endpoint without being asked.
	return &cli.StringFlag{Name: "sandbox", EnvVars: []string{"SPARKLES_WEBHOOK_SANDBOX"}, Usage: usage}
}

func webhookDescriptionFlag() cli.Flag {
	return &cli.StringFlag{Name: "description", EnvVars: []string{"SPARKLES_WEBHOOK_DESCRIPTION"}, Usage: "a note on the endpoint, for people"}
}

func eventTypes(names []string) []sandbox.Type {
	var types []sandbox.Type
	for _, n := range names {
		if n = strings.TrimSpace(n); n != "" {
			types = append(types, sandbox.Type(n))
		}
	}
	return types
}

// webhookPatch is the change the update flags ask for; flags not given
// stay as they are.
func webhookPatch(c *cli.Context) (sandbox.WebhookPatch, error) {
	var p sandbox.WebhookPatch
	if c.IsSet("endpoint") {
		u := c.String("endpoint")
		p.URL = &u
	}
	if c.IsSet("event") {
		if p.Events = eventTypes(c.StringSlice("event")); len(p.Events) == 0 {
			return p, usagef("--event needs an event type; see `%s --help`", c.Command.HelpName)
		}
	}
	if c.IsSet("description") {
		d := c.String("description")
		p.Description = &d
	}
	switch enable, disable := c.Bool("enable"), c.Bool("disable"); {
	case enable && disable:
		return p, usagef("--enable and --disable contradict each other; give one")
	case enable || disable:
		p.Enabled = &enable
	}
	if p.URL == nil && p.Events == nil && p.Description == nil && p.Enabled == nil {
		return p, usagef("nothing to change: give --endpoint, --event, --description, --enable or --disable; see `%s --help`", c.Command.HelpName)
	}
	return p, nil
}

// webhookCall makes the command's API client and runs its one call,
// describing a refusal in the words of webhooks.
func webhookCall[T any](c *cli.Context, call func(api *apiClient) (T, error)) (T, error) {
	api, err := newAPIClient(c)
	if err != nil {
		var zero T
		return zero, err
	}
	v, err := call(api)
	if err != nil {
		return v, describeWebhook(api, err)
	}
	return v, nil
}

// printAnswer prints an answer as JSON with --json, else as text does.
func printAnswer[T any](c *cli.Context, v T, text func(io.Writer, T) error) error {
	if c.Bool("json") {
		return printJSON(c.App.Writer, v)
	}
	return text(c.App.Writer, v)
}

// describeWebhook is apiClient.describe with what a webhook command adds:
// where to find an endpoint or a delivery, and what a refused loopback or
// private URL needs of the server.
func describeWebhook(api *apiClient, err error) error {
	var e *client.Error
	if errors.As(err, &e) {
		switch msg := strings.ToLower(e.Message); {
		case e.Type == sandbox.ENotFound && strings.Contains(msg, "deliver"):
			return fmt.Errorf("%s; `sparkles webhooks deliveries ID` shows an endpoint's deliveries", e.Message)
		case e.Type == sandbox.ENotFound && strings.Contains(msg, "webhook"):
			return fmt.Errorf("%s; `sparkles webhooks list` shows the endpoints", e.Message)
		case refusesPrivate(err) && strings.Contains(msg, "--webhook-allow-private"):
			return errors.New(e.Message)
		case refusesPrivate(err):
			return fmt.Errorf("%s; to deliver to this machine or a private network, the server at %s must run with --webhook-allow-private", e.Message, api.url)
		}
	}
	return api.describe(err)
}

// refusesPrivate reports whether err is the server's refusal of an
// endpoint on a loopback or private address.
func refusesPrivate(err error) bool {
	var e *client.Error
	if !errors.As(err, &e) || e.Type != sandbox.EInvalidRequest {
		return false
	}
	msg := strings.ToLower(e.Message)
	return strings.Contains(msg, "private") || strings.Contains(msg, "loopback")
}

// printCreatedWebhook prints the answer of a creation or a rotation: the
// endpoint, then its secret with the warning that it is not shown again.
func printCreatedWebhook(c *cli.Context, wh sandbox.CreatedWebhook) error {
	note := fmt.Sprintf("The secret is not shown again: keep it where the receiver can read it (`sparkles webhooks rotate %s` makes a new one).", wh.ID)
	if c.Bool("json") {
		if err := printJSON(c.App.Writer, wh); err != nil {
			return err
		}
		fmt.Fprintln(c.App.ErrWriter, note)
		return nil
	}
	if err := printWebhookSecret(c.App.Writer, wh.Webhook, wh.Secret); err != nil {
		return err
	}
	_, err := fmt.Fprintln(c.App.Writer, note)
	return err
}

func printWebhook(w io.Writer, wh sandbox.Webhook) error { return printWebhookSecret(w, wh, "") }

// printWebhookSecret prints an endpoint, then its secret when one is given.
func printWebhookSecret(w io.Writer, wh sandbox.Webhook, secret string) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row := func(k, v string) { fmt.Fprintf(tw, "%s\t%s\n", k, v) }
	row("id", wh.ID)
	row("url", cell(wh.URL, 200))
	state := wh.State
	if wh.DisabledReason != "" {
		state += " (" + cell(wh.DisabledReason, 200) + ")"
	}
	row("state", state)
	row("events", eventList(wh.Events))
	if wh.SandboxID != "" {
		row("sandbox", wh.SandboxID)
	} else {
		row("sandbox", "every sandbox")
	}
	if wh.Description != "" {
		row("description", cell(wh.Description, 200))
	}
	row("created", formatTime(wh.CreatedAt))
	row("delivered", fmt.Sprint(wh.Stats.Delivered))
	row("failed", fmt.Sprint(wh.Stats.Failed))
	row("lag", fmt.Sprintf("%d events", wh.Stats.Lag))
	if t := wh.Stats.OldestUndeliveredAt; t != nil {
		row("oldest undelivered", formatTime(*t))
	}
	if d := wh.Stats.LastAttempt; d != nil {
		row("last attempt", fmt.Sprintf("%s  %s  %s", formatTime(d.At), d.Type, attemptOutcome(*d)))
	}
	if secret != "" {
		row("secret", secret)
	}
	return tw.Flush()
}

func printWebhooks(w io.Writer, list []sandbox.Webhook) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTATE\tURL\tEVENTS\tDELIVERED/FAILED\tLAG")
	for _, wh := range list {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d/%d\t%d\n", wh.ID, wh.State, cell(wh.URL, 60), eventList(wh.Events), wh.Stats.Delivered, wh.Stats.Failed, wh.Stats.Lag)
	}
	return tw.Flush()
}

func printDeliveries(w io.Writer, list []sandbox.WebhookDelivery) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TIME\tDELIVERY\tTYPE\tATTEMPT\tSTATUS\tDURATION\tERROR\tNEXT ATTEMPT")
	for _, d := range list {
		status, next, errText := "-", "-", "-"
		if d.StatusCode != 0 {
			status = fmt.Sprint(d.StatusCode)
		}
		if d.NextAttemptAt != nil {
			next = formatTime(*d.NextAttemptAt)
		}
		if d.Error != "" {
			errText = cell(d.Error, 60)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%dms\t%s\t%s\n", formatTime(d.At), d.ID, d.Type, d.Attempt, status, d.DurationMS, errText, next)
	}
	return tw.Flush()
}

// attemptOutcome is an attempt's result in a few words.
func attemptOutcome(d sandbox.WebhookDelivery) string {
	if d.Error == "" {
		return fmt.Sprintf("%d in %dms", d.StatusCode, d.DurationMS)
	}
	return "failed: " + cell(d.Error, 120)
}

func eventList(types []sandbox.Type) string {
	if len(types) == 0 {
		return "-"
	}
	s := make([]string, len(types))
	for i, t := range types {
		s[i] = string(t)
	}
	return strings.Join(s, ",")
}

// cell is a string from the server as one line of at most n runes, without
// control characters or tabs (it is anyone's text, and tables are tabbed).
func cell(s string, n int) string { return oneLine(sanitize(s, false), n) }

// checkHTTPURL refuses a URL the CLI would send requests to that is not an
// absolute http(s) URL.
func checkHTTPURL(flag, raw string) error {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return usagef("%s %q is not an http(s) URL; pass one like http://127.0.0.1:3000/hooks", flag, raw)
	}
	return nil
}
