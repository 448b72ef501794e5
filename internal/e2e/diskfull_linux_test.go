package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sparkles-dev/sparkles/sandbox"
)

// fillDisk writes path until the file system under it is full.
func fillDisk(t *testing.T, path string) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	chunk := make([]byte, 64<<10)
	for {
		if _, err := f.Write(chunk); err != nil {
			if errors.Is(err, syscall.ENOSPC) {
				return
			}
			t.Fatal(err)
		}
	}
}

// driven is a sandbox the disk-full test keeps busy, and the turns the
// server accepted on it.
type driven struct {
	sb       sandbox.Sandbox
	rec      *recorder
	open     string
	accepted []string
}

// TestDiskFull is the outage for real: `sparkles serve` on a data dir that
// is an 8 MiB tmpfs, filled up while turns stream on two sandboxes, then
// freed. While the disk is full the server refuses writes with 503
// unavailable saying the disk is full, and /readyz says so too; once
// there is room again it resumes by itself: every turn it accepted has its
// turn.started and exactly one turn.completed, new turns run, what the
// clients streamed is the log byte for byte, and a restart finds nothing
// left open. Mounting needs root, as CI runs; elsewhere it is skipped.
func TestDiskFull(t *testing.T) {
	data := tmpfsDataDir(t, "8m")
	const token = "diskfull-token"
	env := cliEnv(t)
	// No reserve: this is the store's own outage, which the disk guard
	// would otherwise forestall (TestDiskLimits).
	args := []string{"--flush-interval", "5ms", "--retention-interval", "200ms", "--disk-reserve", "0"}
	p := startServe(t, env, data, token, args...)
	p.waitServing()

	boxes := make([]*driven, 2)
	for i := range boxes {
		d := &driven{}
		p.mustCall(http.MethodPost, "/v1/sandboxes", map[string]any{}, http.StatusCreated, &d.sb)
		d.rec = newRecorder(t, d.sb.ID, token)
		d.rec.follow(p)
		boxes[i] = d
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// post starts a turn on d, unless one is open and force is false; it
	// returns the error answer when the server refused it.
	post := func(d *driven, input string, force bool) *apiError {
		t.Helper()
		if !force && d.open != "" && len(d.rec.of(d.open, sandbox.TypeTurnCompleted)) == 0 {
			return nil
		}
		status, h, b := p.send(http.MethodPost, "/v1/sandboxes/"+d.sb.ID+"/turns", map[string]any{"input": input})
		switch status {
		case http.StatusAccepted:
			var turn sandbox.Turn
			if err := json.Unmarshal(b, &turn); err != nil {
				t.Fatalf("decode %s: %v", b, err)
			}
			d.open = turn.ID
			d.accepted = append(d.accepted, turn.ID)
		case http.StatusConflict:
			// The last turn's end is not visible to the recorder yet.
		default:
			a := p.errorAnswer(status, h, b)
			return &a
		}
		return nil
	}
	for _, d := range boxes {
		post(d, "slow", false)
	}
	for _, d := range boxes {
		d.rec.waitText(d.open)
	}

	// Fill the disk while the turns stream, and keep them coming until the
	// server has told both a client and /readyz that the disk is full.
	fillDisk(t, filepath.Join(data, "filler"))
	var refused *apiError
	readyzSaid := false
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for refused == nil || !readyzSaid {
		for _, d := range boxes {
			// Once /readyz has said it, a turn is posted even on top of an
			// open one: the outage is answered before any conflict.
			if a := post(d, "slow", readyzSaid); a != nil && a.status != http.StatusConflict && refused == nil {
				refused = a
			}
		}
		a, err := getReadyz(p.url)
		if err != nil {
			t.Fatal(err)
		}
		if a.code == http.StatusServiceUnavailable {
			if !strings.Contains(a.Reason, "disk full") {
				t.Fatalf("/readyz with the disk full says %q, want that the disk is full", a.Reason)
			}
			readyzSaid = true
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the server never said the disk is full (refused: %v, /readyz said so: %v)\n%s", refused, readyzSaid, p.logTail())
		case <-tick.C:
		}
	}
	// Keep the disk full until no turn can still be going on: each
	// sandbox has its turn's end in the log or its agent stopped. A turn
	// whose end the store refuses must not end anyway in memory and be
	// forgotten; it is stopped, and its end waits for the disk.
	waitSeries(t, p, func(s series) string {
		closed := 0
		for _, d := range boxes {
			if d.open == "" || len(d.rec.of(d.open, sandbox.TypeTurnCompleted)) > 0 {
				closed++
			}
		}
		if running := int(s.get("sparkles_agents_running")); running > closed {
			return fmt.Sprintf("%d agents still run for %d sandboxes whose turn ended in the log", running, closed)
		}
		return ""
	})
	if refused.status != http.StatusServiceUnavailable || refused.Error.Type != sandbox.EUnavailable || !strings.Contains(refused.Error.Message, "disk full") {
		t.Fatalf("a turn posted with the disk full = %d %+v; want 503 unavailable saying the disk is full", refused.status, refused.Error)
	}
	// Reads keep working from what is durable.
	for _, d := range boxes {
		p.mustCall(http.MethodGet, "/v1/sandboxes/"+d.sb.ID, nil, http.StatusOK, nil)
		readEventLog(t, p, d.sb.ID)
	}

	if err := os.Remove(filepath.Join(data, "filler")); err != nil {
		t.Fatal(err)
	}
	waitReadyz(t, p, http.StatusOK, "")
	for _, d := range boxes {
		for _, turn := range d.accepted {
			d.rec.wait(turn, sandbox.TypeTurnCompleted)
		}
		// The sandbox takes turns again.
		d.open = ""
		if a := post(d, "hello", false); a != nil {
			t.Fatalf("a turn after the disk was freed: %d %+v", a.status, a.Error)
		}
		var done sandbox.TurnCompleted
		mustDecode(t, d.rec.wait(d.open, sandbox.TypeTurnCompleted), &done)
		if done.Status != sandbox.TurnSucceeded {
			t.Fatalf("the turn after the disk was freed ended %+v", done)
		}
	}
	s, err := scrape(p)
	if err != nil {
		t.Fatal(err)
	}
	if s.get("sparkles_store_append_failures_total") < 1 || s.get("sparkles_store_healthy") != 1 {
		t.Fatalf("after the outage: sparkles_store_append_failures_total %v, sparkles_store_healthy %v",
			s.get("sparkles_store_append_failures_total"), s.get("sparkles_store_healthy"))
	}
	for _, d := range boxes {
		log := readEventLog(t, p, d.sb.ID)
		checkInvariants(t, log)
		wantAccepted(t, log, d.accepted)
		d.rec.wantSameAs(log)
		d.rec.stop()
		var ends []string
		for _, ev := range log {
			if c, ok := ev.Data.(*sandbox.TurnCompleted); ok {
				ends = append(ends, c.Status)
			}
		}
		t.Logf("sandbox %s: %d events, turns ended %v", d.sb.ID, len(log), ends)
	}
	t.Logf("%v appends refused, %v retried", s.get("sparkles_store_append_failures_total"), s.get("sparkles_store_append_retries_total"))
	if code := p.signal(syscall.SIGTERM); code != 0 {
		t.Fatalf("serve exited with %d:\n%s", code, p.logTail())
	}

	// A restart finds nothing open: the log was settled without it.
	p = startServe(t, env, data, token, args...)
	p.waitServing()
	for _, d := range boxes {
		var sb sandbox.Sandbox
		p.mustCall(http.MethodGet, "/v1/sandboxes/"+d.sb.ID, nil, http.StatusOK, &sb)
		if sb.CurrentTurn != nil {
			t.Errorf("after the restart sandbox %s still has turn %s open", sb.ID, sb.CurrentTurn.ID)
		}
		log := readEventLog(t, p, d.sb.ID)
		checkInvariants(t, log)
		wantAccepted(t, log, d.accepted)
		for _, ev := range log {
			if d, ok := ev.Data.(*sandbox.SandboxError); ok && d.Code == sandbox.ErrCoordinatorRestarted {
				t.Errorf("the restart had to settle a turn (%s %d): the outage left it open", ev.TurnID, ev.ID)
			}
		}
	}
	if code := p.signal(syscall.SIGTERM); code != 0 {
		t.Fatalf("serve exited with %d:\n%s", code, p.logTail())
	}
}

// tmpfsDataDir mounts a tmpfs of size (mount's spelling: 8m) as a data
// dir of its own, unmounted when the test ends: a disk that fills up
// without filling the machine's. It needs root, which CI has.
func tmpfsDataDir(t *testing.T, size string) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("skipped: mounting a tmpfs as the data dir needs root (CI runs this as root)")
	}
	data := filepath.Join(t.TempDir(), "data")
	if err := os.Mkdir(data, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", data, "tmpfs", 0, "size="+size+",mode=0700"); err != nil {
		t.Skipf("skipped: cannot mount a tmpfs as the data dir (%v); this test needs root with CAP_SYS_ADMIN", err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(data, syscall.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", data, err)
		}
	})
	return data
}
