package server

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/sparkles-dev/sparkles/retention"
	"github.com/sparkles-dev/sparkles/sandbox"
)

// retentionPass runs one pass of the real retention loop over the harness's
// store, keeping the newest keep events of every log.
func (h *harness) retentionPass(keep int) retention.Result {
	h.t.Helper()
	l := retention.New(retention.Config{Store: h.store, MaxEvents: keep, Batch: 64})
	res, err := l.RunOnce(context.Background(), time.Now())
	if err != nil {
		h.t.Fatalf("retention pass: %v", err)
	}
	return res
}

func TestRetentionCursorPruned(t *testing.T) {
	h := newHarness(t, options{})
	c := h.createSandbox()
	h.appendMessages(c.ID, 300, 10)
	ids := h.logIDs(c.ID)
	if got, want := h.retentionPass(200).Pruned, len(ids)-200; got != want {
		t.Fatalf("pruned %d, want %d", got, want)
	}
	cut := len(ids) - 200 // ids[cut-1] is pruned_through, ids[cut] the oldest kept
	last := ids[len(ids)-1]

	t.Run("ErrCursorPrunedPage", func(t *testing.T) {
		e := h.request(http.MethodGet, "/v1/sandboxes/"+c.ID+"/events?since="+sandbox.FormatID(ids[cut-2]), h.token, nil).
			fails(t, http.StatusGone, sandbox.ECursorPruned)
		checkMarks(t, e, ids[cut], ids[cut-1], last)
	})
	t.Run("ErrCursorPrunedStream", func(t *testing.T) {
		_, resp := h.tryStream(c.ID, "", map[string]string{"Last-Event-ID": sandbox.FormatID(ids[0])})
		if resp == nil {
			t.Fatal("resume below pruned_through opened a stream")
		}
		defer resp.Body.Close()
		r := response{status: resp.StatusCode, header: resp.Header}
		r.body, _ = readAll(resp)
		checkMarks(t, r.fails(t, http.StatusGone, sandbox.ECursorPruned), ids[cut], ids[cut-1], last)
	})
	t.Run("OKAtMark", func(t *testing.T) {
		s := h.openStream(c.ID, "since="+sandbox.FormatID(ids[cut-1]), nil)
		snap := s.snapshot()
		if got, want := snap.PrunedThrough, sandbox.Seq(ids[cut-1]); got != want {
			t.Fatalf("snapshot pruned_through %d, want %d", got, want)
		}
		if got, want := snap.OldestEventID, sandbox.Seq(ids[cut]); got != want {
			t.Fatalf("snapshot oldest_event_id %d, want %d", got, want)
		}
		s.expectIDs(ids[cut:])
	})
	t.Run("OKSandbox", func(t *testing.T) {
		var sb sandbox.Sandbox
		h.ok(http.MethodGet, "/v1/sandboxes/"+c.ID, nil, http.StatusOK, &sb)
		if got, want := sb.PrunedThrough, sandbox.Seq(ids[cut-1]); got != want {
			t.Fatalf("pruned_through %d, want %d", got, want)
		}
		if got, want := sb.OldestEventID, sandbox.Seq(ids[cut]); got != want {
			t.Fatalf("oldest_event_id %d, want %d", got, want)
		}
	})
}

func TestRetentionPrunesUnderfoot(t *testing.T) {
	// A stream replaying history is held between two reads while a
	// retention pass prunes past its position: it must end, not skip.
	h := newHarness(t, options{})
	c := h.createSandbox()
	h.appendMessages(c.ID, 3*replayBatch, 10)
	ids := h.logIDs(c.ID)
	cut := ids[replayBatch-1]
	reached, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	h.reads.setOnRead(func(id string, after uint64) {
		if id == c.ID && after == cut {
			once.Do(func() { close(reached) })
			<-release
		}
	})
	s := h.openStream(c.ID, "since=0", nil)
	s.snapshot()
	s.expectIDs(ids[:replayBatch])
	waitClosed(t, reached)
	if res := h.retentionPass(replayBatch); res.Pruned < replayBatch+1 {
		t.Fatalf("pruned %d, want past the stream's position", res.Pruned)
	}
	close(release)
	s.ended()
	_, resp := h.tryStream(c.ID, "", map[string]string{"Last-Event-ID": sandbox.FormatID(cut)})
	if resp == nil {
		t.Fatal("resume below pruned_through opened a stream")
	}
	resp.Body.Close()
	if got, want := resp.StatusCode, http.StatusGone; got != want {
		t.Fatalf("status %d, want %d", got, want)
	}
}
