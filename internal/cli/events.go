package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/urfave/cli/v2"

	"github.com/sparkles-dev/sparkles/client"
	"github.com/sparkles-dev/sparkles/sandbox"
)

func newEventsCommand() *cli.Command {
	return &cli.Command{
		Name:      "events",
		Usage:     "print a sandbox's event log; with --follow, keep printing as events come",
		ArgsUsage: "SANDBOX_ID",
		Flags: clientFlags(
			&cli.Uint64Flag{Name: "since", EnvVars: []string{"SPARKLES_EVENTS_SINCE"}, Usage: "only events with an id above this one (default 0: all that is retained)"},
			&cli.BoolFlag{Name: "follow", Aliases: []string{"f"}, EnvVars: []string{"SPARKLES_EVENTS_FOLLOW"}, Usage: "keep printing new events, resuming across reconnections and server restarts, until interrupted"},
			&cli.BoolFlag{Name: "json", EnvVars: []string{"SPARKLES_JSON"}, Usage: "print each event's envelope as the server sent it, one per line (NDJSON)"},
		),
		Action: func(c *cli.Context) error {
			args, err := positional(c, 1, 1)
			if err != nil {
				return err
			}
			api, err := newAPIClient(c)
			if err != nil {
				return err
			}
			p := &eventPrinter{out: c.App.Writer, json: c.Bool("json"), follow: c.Bool("follow"), id: args[0]}
			// approve reads SPARKLES_URL as this command did; a --url flag
			// has to be passed again.
			if u := c.String("url"); u != defaultURL && u != os.Getenv("SPARKLES_URL") {
				p.flags = " --url " + shellQuote(u)
			}
			if !c.Bool("follow") {
				return printLog(c.Context, api, args[0], c.Uint64("since"), p)
			}
			ctx, stop := signalContext(c.Context)
			defer stop()
			return followLog(ctx, api, args[0], c.Uint64("since"), p, c.App.ErrWriter)
		},
	}
}

// printLog prints the retained log from since, page by page.
func printLog(ctx context.Context, api *apiClient, id string, since uint64, p *eventPrinter) error {
	for {
		page, err := api.Events(ctx, id, since, 1000)
		if err != nil {
			if e, ok := errors.AsType[*client.Error](err); ok && e.Type == sandbox.ECursorPruned {
				return fmt.Errorf("events after %d were pruned (the log now starts at %d); pass a --since of at least %d, or 0 for all that is retained",
					since, e.OldestEventID, e.PrunedThrough)
			}
			if e, ok := errors.AsType[*client.Error](err); ok && e.Type == sandbox.ECursorStale {
				return fmt.Errorf("--since %d is beyond the last event (%d) of sandbox %s", since, e.LastEventID, id)
			}
			return api.describe(err)
		}
		for i := range page.Events {
			if err := p.event(page.Events[i], page.Raw[i]); err != nil {
				return err
			}
		}
		if !page.HasMore {
			return nil
		}
		since = page.NextSince
	}
}

// followLog streams the log from since until ctx ends.
func followLog(ctx context.Context, api *apiClient, id string, since uint64, p *eventPrinter, errw io.Writer) error {
	var down atomic.Bool
	s := api.Stream(ctx, id, client.StreamOptions{
		Since: client.Since(since),
		OnRetry: func(err error, _ time.Duration) {
			// One line per outage, not one per attempt.
			if !down.Swap(true) {
				fmt.Fprintf(errw, "sparkles: lost the stream (%v); reconnecting to %s\n", reason(err), api.url)
			}
		},
	})
	defer s.Close()
	for m, err := range s.Events() {
		if err != nil {
			if ctx.Err() != nil {
				return nil // interrupted: the normal end of --follow
			}
			return api.describe(err)
		}
		if down.Swap(false) {
			fmt.Fprintln(errw, "sparkles: reconnected")
		}
		switch m.Kind {
		case client.KindEvent, client.KindStatus:
			if err := p.event(m.Event, m.Raw); err != nil {
				return err
			}
		case client.KindGap:
			fmt.Fprintf(errw, "sparkles: events %d to %d were pruned before they could be read\n", m.Gap.From, m.Gap.To)
		}
	}
	return nil
}

// reason shortens a stream error for a notice line.
func reason(err error) string {
	if client.IsUnreachable(err) {
		return "server not reachable"
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return "connection closed"
	}
	return err.Error()
}

// eventPrinter prints events as NDJSON or as one line each that fits 100
// columns: id, time, type and the gist of the data, without the ids of
// parts and tools, which nothing takes as an argument. With follow set, an
// approval request gets a second line with the command that approves it.
type eventPrinter struct {
	out    io.Writer
	json   bool
	follow bool
	id     string // the sandbox
	flags  string // what approve needs besides the ids: --url when given as a flag
}

// eventWidth is the width of a line; the prefix takes eventPrefix of it.
const (
	eventWidth  = 100
	eventPrefix = 6 + 1 + 8 + 1 + 18 + 1
)

func (p *eventPrinter) event(ev sandbox.Event, raw []byte) error {
	var err error
	if p.json {
		_, err = fmt.Fprintf(p.out, "%s\n", raw)
		return err
	}
	id := "-"
	if ev.ID != 0 {
		id = sandbox.FormatID(ev.ID)
	}
	gist := sanitize(summary(ev, eventWidth-eventPrefix), false)
	_, err = fmt.Fprintf(p.out, "%6s %s %-18s %s\n", id, ev.TS.Local().Format("15:04:05"), ev.Type, gist)
	if a, ok := ev.Data.(*sandbox.ApprovalRequested); ok && p.follow && err == nil {
		// Under the time, not the gist: the two ids take 60 columns.
		_, err = fmt.Fprintf(p.out, "%7s→ sparkles approve %s %s%s (or deny)\n", "", p.id, a.ApprovalID, p.flags)
	}
	return err
}

// summary is the gist of an event's data in at most n runes.
func summary(ev sandbox.Event, n int) string {
	switch d := ev.Data.(type) {
	case *sandbox.TurnStarted:
		var parts []string
		for _, in := range d.Input {
			parts = append(parts, in.Text)
		}
		// The turn id is what sparkles cancel takes: it stays whole.
		return oneLine(strings.Join(parts, " "), max(8, n-len(ev.TurnID)-1)) + " " + ev.TurnID
	case *sandbox.TurnQueuedData:
		var parts []string
		for _, in := range d.Input {
			parts = append(parts, in.Text)
		}
		pos := fmt.Sprintf("#%d ", d.Position)
		return pos + oneLine(strings.Join(parts, " "), max(8, n-len(pos)-len(ev.TurnID)-1)) + " " + ev.TurnID
	case *sandbox.TurnCompleted:
		s := fmt.Sprintf("%s (%s) in %v", d.Status, d.StopReason, time.Duration(d.DurationMS)*time.Millisecond)
		if d.Error != nil {
			s += ": " + d.Error.Code + ": " + d.Error.Message
		} else if u := d.Usage; u != nil && u.InputTokens+u.OutputTokens > 0 {
			s += " · " + tokensUsed(u)
		}
		if u := d.Usage; d.Error == nil && u != nil && u.Cost != nil {
			s += " · " + costWords(u.Cost)
		}
		if c := changesLine(d.Changes, func(_, s string) string { return s }); c != "" {
			s += " · " + c
		}
		return oneLine(s, n)
	case *sandbox.MessageUpdated:
		// A part grows: its end is what is new.
		return d.Kind + ": " + lastOf(d.Text, n-len(d.Kind)-2)
	case *sandbox.MessageCompleted:
		return oneLine(d.Text, n)
	case *sandbox.ToolUpdated:
		return oneLine("["+d.Kind+"] "+d.Title, n-len(d.Status)-3) + " · " + d.Status
	case *sandbox.ApprovalRequested:
		return oneLine("["+d.Kind+"] "+d.Title, n)
	case *sandbox.ApprovalResolved:
		return oneLine(d.Decision+" ("+d.Reason+") "+d.ApprovalID, n)
	case *sandbox.SandboxError:
		return oneLine(d.Code+": "+d.Message, n)
	case *sandbox.WorkspaceReverted:
		return "the workspace is as it was when " + d.TurnID + " started"
	case *sandbox.PlanUpdated:
		return planLine(d, n)
	case *sandbox.TurnUsage:
		return oneLine(usageLine(&d.Usage), n)
	case *sandbox.ToolOutput:
		return outputLine(d, n)
	case *sandbox.SandboxUpdated:
		return configLine(d, n)
	case *sandbox.SandboxStatus:
		if d.Detail != "" {
			return oneLine(d.Status+": "+d.Detail, n)
		}
		return d.Status
	}
	return ""
}

// planLine is an agent's plan on one line of at most n runes: how much is
// done, then each entry with its mark (✓ done, ◐ doing, ○ to do).
func planLine(d *sandbox.PlanUpdated, n int) string {
	done := 0
	items := make([]string, len(d.Entries))
	for i, e := range d.Entries {
		mark := "○"
		switch e.Status {
		case sandbox.PlanCompleted:
			mark = "✓"
			done++
		case sandbox.PlanInProgress:
			mark = "◐"
		}
		items[i] = mark + " " + e.Content
	}
	if len(items) == 0 {
		return "[plan] empty"
	}
	return oneLine(fmt.Sprintf("[plan] %d of %d done: %s", done, len(items), strings.Join(items, " · ")), n)
}

// outputLine is a command's output on one line of at most n runes: its
// tool, how it ended once it did, and the end of what it printed, which is
// what is new.
func outputLine(d *sandbox.ToolOutput, n int) string {
	head := d.ToolCallID
	if d.ExitCode != nil {
		head += fmt.Sprintf(" exit %d", *d.ExitCode)
	}
	text := strings.TrimSpace(d.Text)
	if text == "" {
		return oneLine(head+": no output", n)
	}
	head += ": "
	if len([]rune(head)) >= n-8 {
		return oneLine(head+text, n)
	}
	return head + lastOf(text, n-len([]rune(head)))
}

// tokensUsed says how many tokens a turn took, as its agent reported them.
func tokensUsed(u *sandbox.Usage) string {
	tokens := "tokens"
	if u.InputTokens == 1 {
		tokens = "token"
	}
	return fmt.Sprintf("%d %s in, %d out", u.InputTokens, tokens, u.OutputTokens)
}

// lastOf folds whitespace and keeps the last n runes of s.
func lastOf(s string, n int) string {
	r := []rune(strings.Join(strings.Fields(s), " "))
	if len(r) <= n {
		return string(r)
	}
	return "…" + string(r[len(r)-n+1:])
}

// oneLine folds whitespace and cuts s to at most n runes.
func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}
