package client

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"strconv"
)

// LogsOptions choose what Logs reads of an agent's log.
type LogsOptions struct {
	// Tail, when positive, starts at the last Tail lines; 0 reads the
	// whole log.
	Tail int
	// NewOnly skips every line the log holds already: with Follow, only
	// what the agent writes from now on.
	NewOnly bool
	// Follow keeps the answer open: each line the agent writes arrives as
	// it is complete, until ctx ends or the body is closed.
	Follow bool
}

// Logs reads what sandbox id's agent wrote to its stderr, as text, redacted
// as every string the server answers is: the rotated file first, then the
// current one. The caller reads and closes it. It needs the server token;
// a stream token gets ErrForbidden.
func (c *Client) Logs(ctx context.Context, id string, o LogsOptions) (io.ReadCloser, error) {
	q := url.Values{}
	switch {
	case o.NewOnly:
		q.Set("tail", "0")
	case o.Tail > 0:
		q.Set("tail", strconv.Itoa(o.Tail))
	}
	if o.Follow {
		q.Set("follow", "true")
	}
	req, err := c.newRequest(ctx, http.MethodGet, c.endpoint(q, "v1", "sandboxes", id, "logs"), nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "text/plain")
	resp, err := c.send(req, http.StatusOK)
	if err != nil {
		return nil, err
	}
	return resp.Body, nil
}
