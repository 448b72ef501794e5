//go:build linux

package coordinator_test

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/sparkles-dev/sparkles/internal/coordinator"
	"github.com/sparkles-dev/sparkles/internal/datadir"
	"github.com/sparkles-dev/sparkles/internal/faultstore"
	"github.com/sparkles-dev/sparkles/sandbox"
)

// writeMiB writes n MiB of data (not a sparse file) at path.
func writeMiB(t *testing.T, path string, n int) {
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
	for range n {
		if _, err := f.Write(block); err != nil {
			t.Fatal(err)
		}
	}
}

// diskStop checks that evs end a turn failed with disk_full after a
// sandbox.error disk_full, both naming flag, and returns the error's message.
func diskStop(t *testing.T, evs []sandbox.Event, turnID, flag string) string {
	t.Helper()
	var msg string
	for _, ev := range evs {
		if d, ok := ev.Data.(*sandbox.SandboxError); ok && ev.TurnID == turnID {
			if d.Code != "disk_full" || !strings.Contains(d.Message, flag) {
				t.Fatalf("sandbox.error %+v, want disk_full naming %s", d, flag)
			}
			msg = d.Message
		}
	}
	c := completed(evs)
	if msg == "" || c == nil || c.Status != sandbox.TurnFailed || c.Error == nil || c.Error.Code != "disk_full" || !strings.Contains(c.Error.Message, flag) {
		t.Fatalf("the turn ended %+v (%s), want failed with disk_full naming %s after a sandbox.error", c, types(evs), flag)
	}
	return msg
}

// TestDiskLimit: a sandbox whose files grow past --sandbox-disk-max while
// its turn runs has its agent stopped and the turn failed with disk_full
// naming the limit; another sandbox's turns go on; a new turn is refused
// while the files stay past the limit and runs once they are removed.
func TestDiskLimit(t *testing.T) {
	e := newEnv(t, func(c *coordinator.Config) { c.SandboxDiskMax = 4 << 20 })
	ctx := context.Background()
	full, other := e.create(sandbox.CreateParams{}), e.create(sandbox.CreateParams{})
	e.waitStatus(full.ID, sandbox.StatusReady)
	turn := must(e.co.StartTurn(ctx, full.ID, "hang"))
	e.waitFor(full.ID, 0, isType(sandbox.TypeMessageUpdated))

	// What the agent would write, written beside it.
	big := filepath.Join(e.workDir(full.ID), "big")
	writeMiB(t, big, 8)
	evs := e.waitFor(full.ID, 0, isType(sandbox.TypeTurnCompleted))
	msg := diskStop(t, evs, turn.ID, "--sandbox-disk-max")
	if !strings.Contains(msg, "4.0 MiB") {
		t.Errorf("the message %q does not say the limit", msg)
	}
	sb := e.waitStatus(full.ID, sandbox.StatusStopped)
	if !strings.Contains(sb.StatusDetail, "--sandbox-disk-max") {
		t.Errorf("status detail %q does not name the limit", sb.StatusDetail)
	}

	// The other sandbox is not held by it.
	next := must(e.co.StartTurn(ctx, other.ID, "hello"))
	if c := completed(e.waitFor(other.ID, 0, isType(sandbox.TypeTurnCompleted))); c.Status != sandbox.TurnSucceeded {
		t.Fatalf("the other sandbox's turn %s ended %+v", next.ID, c)
	}

	_, err := e.co.StartTurn(ctx, full.ID, "hello")
	if !sandbox.IsType(err, sandbox.EConflict) || !strings.Contains(err.Error(), "--sandbox-disk-max") {
		t.Fatalf("a turn past the limit: %v; want a conflict naming --sandbox-disk-max", err)
	}
	var room *coordinator.DiskFullError
	if err := e.co.DiskRoom(full.ID, 0); !errors.As(err, &room) || room.Flag != "--sandbox-disk-max" || room.Used < 8<<20 {
		t.Fatalf("DiskRoom past the limit = %v", err)
	}

	// Once the files are gone, turns run again.
	if err := os.Remove(big); err != nil {
		t.Fatal(err)
	}
	if err := e.co.DiskRoom(full.ID, 1<<20); err != nil {
		t.Fatalf("DiskRoom for 1 MiB under the limit: %v", err)
	}
	if err := e.co.DiskRoom(full.ID, 5<<20); !errors.As(err, &room) {
		t.Fatalf("DiskRoom for 5 MiB with a limit of 4: %v", err)
	}
	again := must(e.co.StartTurn(ctx, full.ID, "hello"))
	evs = e.waitFor(full.ID, 0, func(ev sandbox.Event) bool { return ev.Type == sandbox.TypeTurnCompleted && ev.TurnID == again.ID })
	if c := completed(evs[len(evs)-1:]); c.Status != sandbox.TurnSucceeded {
		t.Fatalf("the turn after the files were removed ended %+v", c)
	}
}

// tmpfsDataDir mounts a tmpfs of size as a data dir. Mounting needs root,
// as CI runs the suite; elsewhere the test is skipped.
func tmpfsDataDir(t *testing.T, size string) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("skipped: mounting a tmpfs as the data dir needs root (CI runs this as root)")
	}
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size="+size+",mode=0700"); err != nil {
		t.Skipf("skipped: cannot mount a tmpfs (%v); this test needs CAP_SYS_ADMIN", err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, syscall.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	return dir
}

// TestDiskReserve: free space under the data dir (a 64 MiB tmpfs) falls
// below --disk-reserve (32 MiB) while a turn runs: every running agent is
// stopped, the running turn fails with disk_full naming the reserve, new
// turns are refused 503 while the store goes on taking writes (a create,
// a delete), and turns run again once there is room.
func TestDiskReserve(t *testing.T) {
	data := tmpfsDataDir(t, "64m")
	e := newEnv(t, func(c *coordinator.Config) { c.DataDir, c.DiskReserve = data, 32<<20 })
	ctx := context.Background()
	busy, idle := e.create(sandbox.CreateParams{}), e.create(sandbox.CreateParams{})
	e.waitStatus(busy.ID, sandbox.StatusReady)
	e.waitStatus(idle.ID, sandbox.StatusReady)
	turn := must(e.co.StartTurn(ctx, busy.ID, "hang"))
	e.waitFor(busy.ID, 0, isType(sandbox.TypeMessageUpdated))

	filler := filepath.Join(data, "filler")
	writeMiB(t, filler, 40)
	diskStop(t, e.waitFor(busy.ID, 0, isType(sandbox.TypeTurnCompleted)), turn.ID, "--disk-reserve")
	// The idle agent is stopped too: any agent may be the one writing.
	e.waitStatus(idle.ID, sandbox.StatusStopped)
	evs := e.waitFor(idle.ID, 0, isType(sandbox.TypeSandboxError))
	if d := evs[len(evs)-1].Data.(*sandbox.SandboxError); d.Code != "disk_full" || evs[len(evs)-1].TurnID != "" {
		t.Fatalf("the idle sandbox's error: %+v, want disk_full outside any turn", d)
	}

	for _, id := range []string{busy.ID, idle.ID} {
		_, err := e.co.StartTurn(ctx, id, "hello")
		if !sandbox.IsType(err, sandbox.EUnavailable) || !strings.Contains(err.Error(), "--disk-reserve") {
			t.Fatalf("a turn below the reserve: %v; want unavailable naming --disk-reserve", err)
		}
	}
	if err := e.co.Writable(); err != nil {
		t.Fatalf("the store below the reserve: %v; it must go on taking writes", err)
	}
	gone := e.create(sandbox.CreateParams{})
	if sb, err := e.co.DeleteSandbox(ctx, gone.ID); err != nil || sb.Status != sandbox.StatusDeleted {
		t.Fatalf("a delete below the reserve: %+v, %v", sb, err)
	}

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	again := must(e.co.StartTurn(ctx, busy.ID, "hello"))
	evs = e.waitFor(busy.ID, 0, func(ev sandbox.Event) bool { return ev.Type == sandbox.TypeTurnCompleted && ev.TurnID == again.ID })
	if c := completed(evs[len(evs)-1:]); c.Status != sandbox.TurnSucceeded {
		t.Fatalf("the turn once there was room ended %+v", c)
	}
}

// TestDeleteRemovesFiles: a delete removes what the agent wrote (work,
// home, tmp) at once, read-only directories included, and keeps agent.log
// for retention to drop with the log.
func TestDeleteRemovesFiles(t *testing.T) {
	e := newEnv(t, nil)
	sb := e.create(sandbox.CreateParams{})
	e.waitStatus(sb.ID, sandbox.StatusReady)
	dir := datadir.Dir(e.dir).Sandbox(sb.ID)
	locked := filepath.Join(dir.Work(), "pkg", "mod")
	if err := os.MkdirAll(locked, 0o755); err != nil {
		t.Fatal(err)
	}
	writeMiB(t, filepath.Join(locked, "m.zip"), 1)
	for _, d := range []string{locked, filepath.Dir(locked)} {
		if err := os.Chmod(d, 0o555); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(filepath.Join(dir.Home(), ".cache"), 0o700); err != nil {
		t.Fatal(err)
	}
	if _, err := e.co.DeleteSandbox(context.Background(), sb.ID); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{dir.Work(), dir.Home(), dir.Tmp()} {
		if _, err := os.Lstat(d); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s after the delete: %v, want it gone", d, err)
		}
	}
	if _, err := os.Stat(dir.AgentLog()); err != nil {
		t.Errorf("agent.log after the delete: %v, want it kept until retention drops the sandbox", err)
	}
}

// TestDeleteDuringOutage: while the store refuses writes, a delete still
// stops the agent, ends the running turn and removes the sandbox's files
// at once, and answers the sandbox as deleted; the record follows when the
// store takes writes again: the turn's end (canceled) and the status.
func TestDeleteDuringOutage(t *testing.T) {
	o := newOutageEnv(t, nil)
	ctx := context.Background()
	sb := o.create(sandbox.CreateParams{})
	o.waitStatus(sb.ID, sandbox.StatusReady)
	r := o.watch(sb.ID)
	turn := o.startHanging(sb.ID)
	// The hanging turn writes nothing: the delete's own write is the
	// first the store refuses.
	o.fs.Fail(faultstore.ErrDiskFull)
	got, err := o.co.DeleteSandbox(ctx, sb.ID)
	if err != nil || got.Status != sandbox.StatusDeleted || got.CurrentTurn != nil {
		t.Fatalf("a delete during the outage = %+v, %v; want the sandbox deleted", got, err)
	}
	if _, err := os.Lstat(o.workDir(sb.ID)); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the work dir after the delete: %v, want it gone at once", err)
	}
	// Asked again, it answers the same: the delete stands.
	if again, err := o.co.DeleteSandbox(ctx, sb.ID); err != nil || again.Status != sandbox.StatusDeleted {
		t.Fatalf("a second delete during the outage = %+v, %v", again, err)
	}
	o.obs.unhealthy(t)
	if _, err := o.co.StartTurn(ctx, sb.ID, "hello"); err == nil {
		t.Fatal("a turn on the deleted sandbox was accepted")
	}

	o.fs.Heal()
	o.obs.settled(t)
	evs := o.waitFor(sb.ID, 0, turnCompleted(turn.ID))
	if c := completed(evs); c.Status != sandbox.TurnCanceled {
		t.Fatalf("the turn ended %+v, want canceled by the delete", c)
	}
	o.waitStatus(sb.ID, sandbox.StatusDeleted)
	o.checkLog(sb.ID, r, turn.ID)
}
