package e2e

import (
	"errors"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sparkles-dev/sparkles/sandbox"
)

// wantDiskStop checks that the recorded turn ended failed with disk_full
// naming flag, after a sandbox.error disk_full naming it too.
func wantDiskStop(t *testing.T, rec *recorder, turn, flag string) {
	t.Helper()
	var done sandbox.TurnCompleted
	mustDecode(t, rec.wait(turn, sandbox.TypeTurnCompleted), &done)
	if done.Status != sandbox.TurnFailed || done.Error == nil || done.Error.Code != "disk_full" || !strings.Contains(done.Error.Message, flag) {
		t.Fatalf("turn %s ended %+v, want failed with disk_full naming %s", turn, done, flag)
	}
	var e sandbox.SandboxError
	mustDecode(t, rec.first(turn, sandbox.TypeSandboxError), &e)
	if e.Code != "disk_full" || !strings.Contains(e.Message, flag) {
		t.Fatalf("sandbox.error %+v, want disk_full naming %s", e, flag)
	}
}

// TestDiskLimits: `sparkles serve` on a data dir that is a 128 MiB tmpfs,
// with --sandbox-disk-max 16M and --disk-reserve 32M, and the hostile
// agent writing 24 MiB into its work dir.
//
//   - Past the workspace limit, its turn fails with disk_full naming the
//     limit; another sandbox's turns go on and its events keep coming; a
//     new turn of the full sandbox is refused 409 naming the limit.
//   - Below the reserve (a file of the operator's takes the room), the
//     running turn of the other sandbox fails with disk_full naming the
//     reserve, and the store still takes the events that say so; a new
//     turn is refused 503. A delete frees the full sandbox's files at once,
//     and turns run again.
//   - With the disk full, so that the store refuses writes (a create is
//     answered 503), a delete still answers the sandbox deleted and its
//     work dir is gone at once; the record follows once there is room.
//
// Mounting needs root, as CI runs; elsewhere it is skipped.
func TestDiskLimits(t *testing.T) {
	data := tmpfsDataDir(t, "128m")
	hostile := buildHostileAgent(t)
	const token = "disklimits-token"
	p := startServe(t, cliEnv(t), data, token, "--agent", "hostile="+hostile,
		"--sandbox-disk-max", "16M", "--disk-reserve", "32M", "--flush-interval", "5ms")
	p.waitServing()
	workOf := func(id string) string { return filepath.Join(data, "sandboxes", id, "work") }
	turnOn := func(id, input string) string {
		t.Helper()
		var turn sandbox.Turn
		p.mustCall(http.MethodPost, "/v1/sandboxes/"+id+"/turns", map[string]any{"input": input}, http.StatusAccepted, &turn)
		return turn.ID
	}
	refused := func(id string, status int, flag string) {
		t.Helper()
		a := p.fails(http.MethodPost, "/v1/sandboxes/"+id+"/turns", map[string]any{"input": "hello"})
		if a.status != status || !strings.Contains(a.Error.Message, flag) {
			t.Fatalf("a turn of %s = %d %+v; want %d naming %s", id, a.status, a.Error, status, flag)
		}
	}

	// The workspace limit.
	var full, other sandbox.Sandbox
	p.mustCall(http.MethodPost, "/v1/sandboxes", map[string]any{"agent": "hostile", "env": map[string]string{"HOSTILE_DISK": "fill=24"}}, http.StatusCreated, &full)
	p.mustCall(http.MethodPost, "/v1/sandboxes", map[string]any{}, http.StatusCreated, &other)
	fullRec, otherRec := newRecorder(t, full.ID, token), newRecorder(t, other.ID, token)
	fullRec.follow(p)
	otherRec.follow(p)
	slow := turnOn(other.ID, "slow")
	filling := turnOn(full.ID, "probe")
	wantDiskStop(t, fullRec, filling, "--sandbox-disk-max")
	if b, err := os.ReadFile(filepath.Join(workOf(full.ID), "disk-fill.done")); err != nil || string(b) != "24" {
		t.Fatalf("the hostile agent wrote %q MiB (%v), want all 24", b, err)
	}
	refused(full.ID, http.StatusConflict, "--sandbox-disk-max")
	for _, turn := range []string{slow, turnOn(other.ID, "hello")} {
		var done sandbox.TurnCompleted
		mustDecode(t, otherRec.wait(turn, sandbox.TypeTurnCompleted), &done)
		if done.Status != sandbox.TurnSucceeded {
			t.Fatalf("the other sandbox's turn %s ended %+v", turn, done)
		}
	}

	// The reserve: the operator's file leaves 16 MiB free.
	hang := turnOn(other.ID, "hang")
	otherRec.waitText(hang)
	var st syscall.Statfs_t
	if err := syscall.Statfs(data, &st); err != nil {
		t.Fatal(err)
	}
	filler := filepath.Join(data, "filler")
	writeFile(t, filler, int64(st.Bavail)*st.Bsize-16<<20)
	wantDiskStop(t, otherRec, hang, "--disk-reserve")
	refused(other.ID, http.StatusServiceUnavailable, "--disk-reserve")
	var gone sandbox.Sandbox
	p.mustCall(http.MethodDelete, "/v1/sandboxes/"+full.ID, nil, http.StatusOK, &gone)
	if gone.Status != sandbox.StatusDeleted {
		t.Fatalf("the deleted sandbox = %+v", gone)
	}
	if _, err := os.Lstat(workOf(full.ID)); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the deleted sandbox's work dir: %v, want it gone at once", err)
	}
	// Its 24 MiB are free again: 40 MiB, above the reserve.
	var after sandbox.TurnCompleted
	mustDecode(t, otherRec.wait(turnOn(other.ID, "hello"), sandbox.TypeTurnCompleted), &after)
	if after.Status != sandbox.TurnSucceeded {
		t.Fatalf("the turn once the delete freed room ended %+v", after)
	}

	// The disk full: the store refuses writes, and a delete still works.
	if err := os.WriteFile(filepath.Join(workOf(other.ID), "notes.txt"), []byte("the agent's"), 0o600); err != nil {
		t.Fatal(err)
	}
	fillDisk(t, filepath.Join(data, "filler2"))
	// bbolt may still find room in pages its file already has: creates
	// go on until one needs a page the disk has not got.
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	deadline := time.Now().Add(30 * time.Second)
	for {
		status, h, b := p.send(http.MethodPost, "/v1/sandboxes", map[string]any{})
		if status != http.StatusCreated {
			a := p.errorAnswer(status, h, b)
			if a.status != http.StatusServiceUnavailable || !strings.Contains(a.Error.Message, "disk full") {
				t.Fatalf("a create with the disk full = %d %+v; want 503 saying the disk is full", a.status, a.Error)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("creates still succeed with the disk full\n%s", p.logTail())
		}
		<-tick.C
	}
	p.mustCall(http.MethodDelete, "/v1/sandboxes/"+other.ID, nil, http.StatusOK, &gone)
	if gone.Status != sandbox.StatusDeleted {
		t.Fatalf("a delete with the disk full answered %+v, want the sandbox deleted", gone)
	}
	if _, err := os.Lstat(workOf(other.ID)); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the work dir after a delete with the disk full: %v, want it gone at once", err)
	}
	for _, f := range []string{"filler", "filler2"} {
		if err := os.Remove(filepath.Join(data, f)); err != nil {
			t.Fatal(err)
		}
	}
	// The record lands with the box's next retry of its waiting writes.
	deadline = time.Now().Add(30 * time.Second)
	for {
		var sb sandbox.Sandbox
		p.mustCall(http.MethodGet, "/v1/sandboxes/"+other.ID, nil, http.StatusOK, &sb)
		if sb.Status == sandbox.StatusDeleted {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the delete's record never landed: %+v\n%s", sb, p.logTail())
		}
		<-tick.C
	}
	log := readEventLog(t, p, other.ID)
	checkInvariants(t, log)
	otherRec.stop()
	fullRec.stop()
	if code := p.signal(syscall.SIGTERM); code != 0 {
		t.Fatalf("serve exited with %d:\n%s", code, p.logTail())
	}
}

// writeFile writes n bytes of data (not a sparse file) at path.
func writeFile(t *testing.T, path string, n int64) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	block := make([]byte, 1<<20)
	for i := range block {
		block[i] = byte(i)
	}
	for n > 0 {
		k := min(n, int64(len(block)))
		if _, err := f.Write(block[:k]); err != nil {
			t.Fatal(err)
		}
		n -= k
	}
}
