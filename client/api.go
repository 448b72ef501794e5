package client

import (
	"context"
	"encoding/json"
	"fmt"
	"iter"
	"net/http"
	"net/url"
	"strconv"

	"github.com/sparkles-dev/sparkles/sandbox"
)

// CreateSandboxRequest is the body of POST /v1/sandboxes. Every field is
// optional; the server's default agent runs when Agent is empty. Secrets
// reach the agent like Env, and their values are redacted from every event.
type CreateSandboxRequest struct {
	Agent    string            `json:"agent,omitempty"`
	Env      map[string]string `json:"env,omitempty"`
	Secrets  map[string]string `json:"secrets,omitempty"`
	Metadata map[string]string `json:"metadata,omitempty"`
	// Source fills the workspace before the agent boots (a git
	// repository); a private one's token comes from Secrets["GIT_TOKEN"].
	Source *sandbox.Source `json:"source,omitempty"`
	// ToolOutput puts the output of the commands the agent runs in the
	// log (tool.output events); what a command prints then reaches the
	// log, redacted of the sandbox's secrets only.
	ToolOutput bool `json:"tool_output,omitempty"`
	// MCPServers are given to the agent's sessions: stdio servers it runs
	// inside its confinement, http or sse ones it reaches. The values of
	// their Env and Headers are secrets, never answered.
	MCPServers []sandbox.MCPServerConfig `json:"mcp_servers,omitempty"`
	// Config is the mode and the model the agent starts in, applied before
	// the first turn (docs/api.md, Agent config).
	Config *sandbox.ConfigChange `json:"config,omitempty"`
}

// CreatedSandbox is the create answer: the sandbox, still booting, and the
// token that can only read it (hand it to a front end instead of the server
// token). Only this answer carries the stream token.
type CreatedSandbox struct {
	sandbox.Sandbox
	StreamToken string `json:"stream_token"`
}

// MarshalJSON writes the sandbox and then the token, as the server answers
// it (the embedded Sandbox's own MarshalJSON would drop the token).
func (c CreatedSandbox) MarshalJSON() ([]byte, error) {
	b, err := json.Marshal(c.Sandbox)
	if err != nil {
		return nil, err
	}
	return sandbox.AppendObjectField(b, "stream_token", c.StreamToken)
}

// CreateSandbox creates a sandbox; its agent boots in the background.
func (c *Client) CreateSandbox(ctx context.Context, r CreateSandboxRequest) (CreatedSandbox, error) {
	var out CreatedSandbox
	err := c.call(ctx, http.MethodPost, c.endpoint(nil, "v1", "sandboxes"), r, http.StatusCreated, &out)
	return out, err
}

// ListOptions pages a list: at most Limit items (0 takes the server's
// default) after the item with id After ("" for the first page).
type ListOptions struct {
	Limit int
	After string
}

// SandboxList is one page of sandboxes, in creation order.
type SandboxList struct {
	Data    []sandbox.Sandbox `json:"data"`
	HasMore bool              `json:"has_more"`
}

// ListSandboxes returns one page of sandboxes.
func (c *Client) ListSandboxes(ctx context.Context, o ListOptions) (SandboxList, error) {
	q := url.Values{}
	if o.Limit > 0 {
		q.Set("limit", strconv.Itoa(o.Limit))
	}
	if o.After != "" {
		q.Set("after", o.After)
	}
	var out SandboxList
	err := c.call(ctx, http.MethodGet, c.endpoint(q, "v1", "sandboxes"), nil, http.StatusOK, &out)
	return out, err
}

// Sandboxes iterates over every sandbox, fetching pages as it goes. An
// error ends the iteration after it is yielded.
func (c *Client) Sandboxes(ctx context.Context) iter.Seq2[sandbox.Sandbox, error] {
	return func(yield func(sandbox.Sandbox, error) bool) {
		o := ListOptions{Limit: 100}
		for {
			page, err := c.ListSandboxes(ctx, o)
			if err != nil {
				yield(sandbox.Sandbox{}, err)
				return
			}
			for _, sb := range page.Data {
				if !yield(sb, nil) {
					return
				}
			}
			if !page.HasMore || len(page.Data) == 0 {
				return
			}
			o.After = page.Data[len(page.Data)-1].ID
		}
	}
}

// GetSandbox returns a sandbox with its current turn and watermarks.
func (c *Client) GetSandbox(ctx context.Context, id string) (sandbox.Sandbox, error) {
	var out sandbox.Sandbox
	err := c.call(ctx, http.MethodGet, c.endpoint(nil, "v1", "sandboxes", id), nil, http.StatusOK, &out)
	return out, err
}

// DeleteSandbox stops a sandbox's agent and cancels its running turn. The
// answer is the sandbox with status deleted; its log stays readable until
// retention drops it.
func (c *Client) DeleteSandbox(ctx context.Context, id string) (sandbox.Sandbox, error) {
	var out sandbox.Sandbox
	err := c.call(ctx, http.MethodDelete, c.endpoint(nil, "v1", "sandboxes", id), nil, http.StatusOK, &out)
	return out, err
}

// SetConfig switches the sandbox's agent to another mode, model or both
// ("" leaves one as it is) between turns: ErrConflict while a turn is
// open, ErrInvalidRequest naming the choices for one the agent does not
// offer. With no agent running the change is kept for its next boot.
func (c *Client) SetConfig(ctx context.Context, id string, ch sandbox.ConfigChange) (sandbox.Sandbox, error) {
	var out sandbox.Sandbox
	body := struct {
		Config sandbox.ConfigChange `json:"config"`
	}{ch}
	err := c.call(ctx, http.MethodPatch, c.endpoint(nil, "v1", "sandboxes", id), body, http.StatusOK, &out)
	return out, err
}

// StartTurn prompts the sandbox's agent with input. The turn is queued
// while the sandbox boots; a sandbox runs one turn at a time
// (ErrTurnInProgress otherwise).
func (c *Client) StartTurn(ctx context.Context, id, input string) (sandbox.Turn, error) {
	return c.startTurn(ctx, id, input, false)
}

// QueueTurn is StartTurn for a turn that may wait: while another turn is
// open it is queued behind it (status queued; at most 16 wait, the next
// is a conflict) and starts when the turns before it have ended.
func (c *Client) QueueTurn(ctx context.Context, id, input string) (sandbox.Turn, error) {
	return c.startTurn(ctx, id, input, true)
}

// StartTurnInput is StartTurn, or with queue QueueTurn, for an input of
// blocks: text, images (base64 data, at most --turn-image-max-size each)
// and files of the workspace by path (docs/api.md).
func (c *Client) StartTurnInput(ctx context.Context, id string, input []sandbox.InputBlock, queue bool) (sandbox.Turn, error) {
	body := struct {
		Input []sandbox.InputBlock `json:"input"`
		Queue bool                 `json:"queue,omitempty"`
	}{input, queue}
	var out sandbox.Turn
	err := c.call(ctx, http.MethodPost, c.endpoint(nil, "v1", "sandboxes", id, "turns"), body, http.StatusAccepted, &out)
	return out, err
}

func (c *Client) startTurn(ctx context.Context, id, input string, queue bool) (sandbox.Turn, error) {
	body := struct {
		Input string `json:"input"`
		Queue bool   `json:"queue,omitempty"`
	}{input, queue}
	var out sandbox.Turn
	err := c.call(ctx, http.MethodPost, c.endpoint(nil, "v1", "sandboxes", id, "turns"), body, http.StatusAccepted, &out)
	return out, err
}

// GetTurn returns a turn of a sandbox.
func (c *Client) GetTurn(ctx context.Context, id, turnID string) (sandbox.Turn, error) {
	var out sandbox.Turn
	err := c.call(ctx, http.MethodGet, c.endpoint(nil, "v1", "sandboxes", id, "turns", turnID), nil, http.StatusOK, &out)
	return out, err
}

// CancelTurn asks the agent to stop a turn. The turn ends with a
// turn.completed event of status canceled once the agent has stopped.
func (c *Client) CancelTurn(ctx context.Context, id, turnID string) (sandbox.Turn, error) {
	var out sandbox.Turn
	err := c.call(ctx, http.MethodPost, c.endpoint(nil, "v1", "sandboxes", id, "turns", turnID, "cancel"), nil, http.StatusAccepted, &out)
	return out, err
}

// Decision answers an approval: Decision "approve" or "deny", or the
// OptionID of one of the approval's options. Set exactly one.
type Decision struct {
	Decision string `json:"decision,omitempty"`
	OptionID string `json:"option_id,omitempty"`
}

// Approve and Deny are the plain decisions.
var (
	Approve = Decision{Decision: "approve"}
	Deny    = Decision{Decision: "deny"}
)

// Decide resolves a pending approval; ErrApprovalResolved when it was
// already resolved (by another client, a timeout or a cancel).
func (c *Client) Decide(ctx context.Context, id, approvalID string, d Decision) (sandbox.Approval, error) {
	var out sandbox.Approval
	err := c.call(ctx, http.MethodPost, c.endpoint(nil, "v1", "sandboxes", id, "approvals", approvalID), d, http.StatusOK, &out)
	return out, err
}

// EventsPage is one page of a sandbox's log.
type EventsPage struct {
	// Events are the decoded envelopes, in id order.
	Events []sandbox.Event
	// Raw holds each event's envelope exactly as the server sent it, for
	// callers that pass events on unchanged.
	Raw []json.RawMessage
	// HasMore is true when events after NextSince exist already.
	HasMore bool
	// NextSince is the cursor of the next page: the last id of this page,
	// or the requested cursor when the page is empty.
	NextSince uint64
	// The log's watermarks as of this page.
	OldestEventID uint64
	LastEventID   uint64
}

type wirePage struct {
	Data          []json.RawMessage `json:"data"`
	HasMore       bool              `json:"has_more"`
	NextSince     sandbox.Seq       `json:"next_since"`
	OldestEventID sandbox.Seq       `json:"oldest_event_id"`
	LastEventID   sandbox.Seq       `json:"last_event_id"`
}

// Events returns up to limit retained events with id > since (limit 0 takes
// the server's default of 100; at most 1000). since 0 reads from the oldest
// retained event and is never refused; a cursor that retention has passed
// is ErrCursorPruned, one beyond the log ErrCursorStale, both with the
// watermarks set.
func (c *Client) Events(ctx context.Context, id string, since uint64, limit int) (EventsPage, error) {
	q := url.Values{"since": {strconv.FormatUint(since, 10)}}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	var w wirePage
	if err := c.call(ctx, http.MethodGet, c.endpoint(q, "v1", "sandboxes", id, "events"), nil, http.StatusOK, &w); err != nil {
		return EventsPage{}, err
	}
	p := EventsPage{
		Events:        make([]sandbox.Event, len(w.Data)),
		Raw:           w.Data,
		HasMore:       w.HasMore,
		NextSince:     uint64(w.NextSince),
		OldestEventID: uint64(w.OldestEventID),
		LastEventID:   uint64(w.LastEventID),
	}
	for i, raw := range w.Data {
		if err := json.Unmarshal(raw, &p.Events[i]); err != nil {
			return EventsPage{}, fmt.Errorf("decode event of sandbox %s: %w", id, err)
		}
	}
	return p, nil
}

// Healthz checks that the server answers. It needs no token.
func (c *Client) Healthz(ctx context.Context) error {
	return c.call(ctx, http.MethodGet, c.endpoint(nil, "healthz"), nil, http.StatusOK, nil)
}

// Agent is one agent a sandbox may ask for: its name, and whether its
// command resolves on the server (an agent that is not available fails to
// start). The server never tells its command or environment.
type Agent = sandbox.Agent

// Agents lists the agents registered on the server, sorted by name.
func (c *Client) Agents(ctx context.Context) ([]Agent, error) {
	var out struct {
		Data []Agent `json:"data"`
	}
	err := c.call(ctx, http.MethodGet, c.endpoint(nil, "v1", "agents"), nil, http.StatusOK, &out)
	return out.Data, err
}
