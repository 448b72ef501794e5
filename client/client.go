// Package client is the Go client of the Sparkles HTTP API (docs/api.md) and its
// resumable event stream reader (docs/stream.md).
//
// A Client has one typed method per endpoint; every error the server answers
// is an *Error with the type of the contract (IsType, errors.Is with the
// Err… sentinels), and a server that is not there at all is an
// *UnreachableError. Client.Stream reads a sandbox's events and keeps
// reading: it reconnects with backoff, resumes from the last event it
// delivered, never delivers an id twice, and recovers from a pruned cursor
// by paging what is retained and reporting what was lost as a Gap.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
)

// Client calls one Sparkles server. It is safe for concurrent use.
type Client struct {
	base  string // without a trailing slash
	token string
	hc    *http.Client
	ua    string
}

// Option configures a Client.
type Option func(*Client)

// WithHTTPClient makes the client send its requests through hc. Streams are
// long-lived, so hc should have no overall Timeout; bound calls with their
// contexts instead.
func WithHTTPClient(hc *http.Client) Option { return func(c *Client) { c.hc = hc } }

// WithUserAgent sets the User-Agent header of every request.
func WithUserAgent(ua string) Option { return func(c *Client) { c.ua = ua } }

// New returns a client of the server at baseURL (e.g. http://127.0.0.1:7410)
// that authenticates with token: the server token, or a sandbox's stream
// token for the read-only calls of that sandbox.
func New(baseURL, token string, opts ...Option) *Client {
	c := &Client{
		base:  strings.TrimRight(baseURL, "/"),
		token: token,
		hc:    &http.Client{},
		ua:    "sparkles-go-client",
	}
	for _, o := range opts {
		o(c)
	}
	return c
}

// BaseURL returns the URL of the server the client calls.
func (c *Client) BaseURL() string { return c.base }

// endpoint builds the URL of an API path from escaped segments.
func (c *Client) endpoint(query url.Values, segments ...string) string {
	var b strings.Builder
	b.WriteString(c.base)
	for _, s := range segments {
		b.WriteByte('/')
		b.WriteString(url.PathEscape(s))
	}
	if len(query) > 0 {
		b.WriteByte('?')
		b.WriteString(query.Encode())
	}
	return b.String()
}

func (c *Client) newRequest(ctx context.Context, method, u string, body any) (*http.Request, error) {
	var r io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, fmt.Errorf("encode request: %w", err)
		}
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, r)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	if c.ua != "" {
		req.Header.Set("User-Agent", c.ua)
	}
	return req, nil
}

// send sends req and returns the response when its status is want; any
// other status is decoded into an *Error and the body closed.
func (c *Client) send(req *http.Request, want int) (*http.Response, error) {
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, c.classify(err)
	}
	if resp.StatusCode != want {
		defer resp.Body.Close()
		return nil, decodeError(resp)
	}
	return resp, nil
}

// call sends a JSON request and decodes the JSON answer into out.
func (c *Client) call(ctx context.Context, method, u string, body any, want int, out any) error {
	req, err := c.newRequest(ctx, method, u, body)
	if err != nil {
		return err
	}
	resp, err := c.send(req, want)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if out == nil {
		_, err = io.Copy(io.Discard, resp.Body)
		return err
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("decode answer of %s %s: %w", method, req.URL.Path, err)
	}
	return nil
}
