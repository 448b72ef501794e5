package main

import (
	"context"
	"errors"
	"fmt"
	"io"
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
			p := &eventPrinter{out: c.App.Writer, json: c.Bool("json")}
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

// eventPrinter prints events as NDJSON or as one readable line each.
type eventPrinter struct {
	out  io.Writer
	json bool
}

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
	turn := ev.TurnID
	if turn == "" {
		turn = "-"
	}
	_, err = fmt.Fprintf(p.out, "%6s  %s  %-18s  %s  %s\n", id, ev.TS.Local().Format("15:04:05.000"), ev.Type, turn, summary(ev))
	return err
}

// summary is the gist of an event's data in one line.
func summary(ev sandbox.Event) string {
	switch d := ev.Data.(type) {
	case *sandbox.TurnStarted:
		var parts []string
		for _, in := range d.Input {
			parts = append(parts, in.Text)
		}
		return oneLine(strings.Join(parts, " "), 100)
	case *sandbox.TurnCompleted:
		s := fmt.Sprintf("%s (%s) in %v", d.Status, d.StopReason, time.Duration(d.DurationMS)*time.Millisecond)
		if d.Error != nil {
			s += ": " + d.Error.Code + ": " + oneLine(d.Error.Message, 100)
		}
		return s
	case *sandbox.MessageUpdated:
		return fmt.Sprintf("%s %s: %s", d.PartID, d.Kind, oneLine(d.Text, 100))
	case *sandbox.MessageCompleted:
		return fmt.Sprintf("%s: %s", d.MessageID, oneLine(d.Text, 100))
	case *sandbox.ToolUpdated:
		return fmt.Sprintf("%s [%s] %s: %s", d.ToolCallID, d.Kind, oneLine(d.Title, 80), d.Status)
	case *sandbox.ApprovalRequested:
		return fmt.Sprintf("%s [%s] %s", d.ApprovalID, d.Kind, oneLine(d.Title, 80))
	case *sandbox.ApprovalResolved:
		return fmt.Sprintf("%s %s (%s)", d.ApprovalID, d.Decision, d.Reason)
	case *sandbox.SandboxError:
		return d.Code + ": " + oneLine(d.Message, 100)
	case *sandbox.SandboxStatus:
		if d.Detail != "" {
			return d.Status + ": " + oneLine(d.Detail, 100)
		}
		return d.Status
	}
	return ""
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
