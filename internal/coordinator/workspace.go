package coordinator

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"

	"github.com/sparkles-dev/sparkles/internal/cluster"
	"github.com/sparkles-dev/sparkles/internal/datadir"
	"github.com/sparkles-dev/sparkles/internal/snapshot"
	"github.com/sparkles-dev/sparkles/internal/workspace"
	"github.com/sparkles-dev/sparkles/sandbox"
)

// The workspace of a sandbox (docs/workspace.md) is its work directory,
// <data-dir>/sandboxes/<id>/work: what the agent works in, and what a
// client reads and writes through Files. What each turn changed is kept
// in a private snapshot store beside it (<id>/snapshots, never in the
// agent's view): the box takes a snapshot when a turn starts and when it
// ends, marks both with the turn's id, and gives turn.completed the
// changes between them. A turn's diff compares the two; a revert restores
// the first. These run on the node that holds the sandbox: its files are
// there.

// workDir is sandbox id's workspace directory.
func (c *Coordinator) workDir(id string) string {
	return datadir.Dir(c.cfg.DataDir).Sandbox(id).Work()
}

// snapDir is sandbox id's snapshot store.
func (c *Coordinator) snapDir(id string) string {
	return datadir.Dir(c.cfg.DataDir).Sandbox(id).Snapshots()
}

// workOwner is who the files the server makes in a workspace belong to:
// the owner of the work directory when the server is root and does not
// own it (the agent's uid, see confine.AgentID), else nil.
func workOwner(dir string) (uid, gid int, ok bool) {
	if os.Geteuid() != 0 {
		return 0, 0, false
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return 0, 0, false
	}
	st, isStat := fi.Sys().(*syscall.Stat_t)
	if !isStat || st.Uid == 0 {
		return 0, 0, false
	}
	return int(st.Uid), int(st.Gid), true
}

// openSnapshots opens sandbox id's snapshot store. Each caller opens its
// own and closes it: the store keeps nothing in memory worth sharing
// between turns beyond its stat cache, which it saves.
func (c *Coordinator) openSnapshots(id string) (*snapshot.Store, error) {
	work := c.workDir(id)
	if err := os.MkdirAll(work, 0o700); err != nil {
		return nil, fmt.Errorf("workspace: %w", err)
	}
	opts := snapshot.Options{Now: c.now}
	if uid, gid, ok := workOwner(work); ok {
		opts.Owner = &snapshot.Owner{UID: uid, GID: gid}
	}
	return snapshot.Open(c.snapDir(id), work, opts)
}

func startMark(turnID string) string { return turnID + "/start" }
func endMark(turnID string) string   { return turnID + "/end" }

// markTurn records the workspace at a boundary of turn turnID (its start
// or its end, named by mark) and answers the snapshot. A failure is
// logged: the turn runs on, and its changes are not recorded.
func (b *box) markTurn(mark string) snapshot.ID {
	s, err := b.c.openSnapshots(b.id)
	if err != nil {
		b.log().Warn("workspace snapshot: open the store", "err", err)
		return ""
	}
	defer s.Close()
	id, err := s.Take(b.c.ctx)
	if err == nil {
		err = s.Mark(mark, id)
	}
	if err != nil {
		b.log().Warn("workspace snapshot", "mark", mark, "err", err)
		return ""
	}
	return id
}

// turnChanges records the end of the running turn and answers what it
// changed, or nil when its start was not recorded or the store failed.
func (b *box) turnChanges(t *turnRun) *sandbox.Changes {
	if t.start == "" {
		return nil
	}
	end := b.markTurn(endMark(t.turn.ID))
	if end == "" {
		return nil
	}
	s, err := b.c.openSnapshots(b.id)
	if err != nil {
		b.log().Warn("workspace snapshot: open the store", "err", err)
		return nil
	}
	defer s.Close()
	ch, err := s.Changes(b.c.ctx, t.start, end)
	if err != nil {
		b.log().Warn("workspace snapshot: changes", "turn_id", t.turn.ID, "err", err)
		return nil
	}
	return &ch
}

// Diff writes the unified diff of what turn turnID changed in sandbox
// id's workspace to w. A turn still queued or running answers
// turn_in_progress; one whose boundaries were not recorded (it never
// reached the agent, or ran before the server kept snapshots) not_found.
func (c *Coordinator) Diff(ctx context.Context, id, turnID string, w io.Writer) error {
	t, err := c.Turn(ctx, id, turnID)
	if err != nil {
		return err
	}
	if t.Status == sandbox.TurnQueued || t.Status == sandbox.TurnRunning {
		return sandbox.Errorf(sandbox.ETurnInProgress, "turn %s is still %s; its diff is there once it completes", turnID, t.Status)
	}
	s, err := c.openSnapshots(id)
	if err != nil {
		return err
	}
	defer s.Close()
	start, end, err := turnMarks(s, turnID)
	if err != nil {
		return err
	}
	return s.Diff(ctx, start, end, w)
}

// turnMarks finds the snapshots of a turn's start and end.
func turnMarks(s *snapshot.Store, turnID string) (start, end snapshot.ID, err error) {
	start, err = s.Marked(startMark(turnID))
	if err == nil {
		end, err = s.Marked(endMark(turnID))
	}
	if sandbox.IsType(err, sandbox.ENotFound) {
		return "", "", sandbox.Errorf(sandbox.ENotFound, "turn %s has no record of the workspace: it never reached the agent, or its end was not recorded", turnID)
	}
	return start, end, err
}

// Revert puts sandbox id's workspace back as it was when turn turnID
// started, and writes workspace.reverted. It runs between turns only.
func (c *Coordinator) Revert(ctx context.Context, id, turnID string) (sandbox.Sandbox, error) {
	if _, err := c.Turn(ctx, id, turnID); err != nil {
		return sandbox.Sandbox{}, err
	}
	return callAs[sandbox.Sandbox](ctx, c, cluster.Call{Op: cluster.OpRevert, SandboxID: id, TurnID: turnID})
}

// revert runs on the box: no turn may run meanwhile, since the agent
// would write into a tree being put back.
func (b *box) revert(turnID string) (sandbox.Sandbox, error) {
	if b.deleted {
		return sandbox.Sandbox{}, sandbox.Errorf(sandbox.EConflict, "sandbox %s is deleted", b.id)
	}
	if b.turn != nil {
		return sandbox.Sandbox{}, sandbox.Errorf(sandbox.ETurnInProgress,
			"turn %s is %s; revert once it completes, or cancel it", b.turn.turn.ID, b.turn.turn.Status)
	}
	if _, _, err := b.translator(); err != nil {
		return sandbox.Sandbox{}, err
	}
	s, err := b.c.openSnapshots(b.id)
	if err != nil {
		return sandbox.Sandbox{}, err
	}
	defer s.Close()
	start, err := s.Marked(startMark(turnID))
	if sandbox.IsType(err, sandbox.ENotFound) {
		return sandbox.Sandbox{}, sandbox.Errorf(sandbox.ENotFound, "turn %s has no record of the workspace at its start: it never reached the agent", turnID)
	}
	if err != nil {
		return sandbox.Sandbox{}, err
	}
	if err := s.Restore(b.c.ctx, start); err != nil {
		return sandbox.Sandbox{}, fmt.Errorf("revert to turn %s: %w", turnID, err)
	}
	b.log().Info("workspace reverted", "turn_id", turnID)
	if err := b.tryWrite(b.tr.Reverted(turnID), nil); err != nil {
		return sandbox.Sandbox{}, err
	}
	return b.c.store.Sandbox(b.c.ctx, b.id)
}

// Files opens sandbox id's workspace on this node for a client's request,
// its Room asking the sandbox's disk limits; Close it after. A deleted
// sandbox answers conflict; one whose repository is still being cloned, too.
func (c *Coordinator) Files(ctx context.Context, id string) (sandbox.Files, error) {
	sb, err := c.store.Sandbox(ctx, id)
	if err != nil {
		return nil, err
	}
	if sb.Status == sandbox.StatusDeleted {
		return nil, sandbox.Errorf(sandbox.EConflict, "sandbox %s is deleted; its files are removed", id)
	}
	if c.cfg.DataDir == "" {
		return nil, sandbox.Errorf(sandbox.EConflict, "this server keeps no workspaces: it runs without a data directory")
	}
	if c.cloning(id) {
		return nil, sandbox.Errorf(sandbox.EConflict, "sandbox %s is cloning its repository; its files are there once it is ready", id)
	}
	work := c.workDir(id)
	if err := os.MkdirAll(work, 0o700); err != nil {
		return nil, fmt.Errorf("workspace: %w", err)
	}
	opts := workspace.Options{Limits: c.cfg.FileLimits, Log: c.log.With("sandbox_id", id)}
	if uid, gid, ok := workOwner(work); ok {
		opts.Owner = &workspace.Owner{UID: uid, GID: gid}
	}
	// What an upload already put down counts: the check walks the
	// workspace, staging directory included.
	opts.Room = func(add int64) error { return c.filesRoom(id, add) }
	ws, err := workspace.Open(work, opts)
	if err != nil {
		return nil, err
	}
	return ws, nil
}

// filesRoom answers nil when add more bytes fit sandbox id's disk limits,
// else an insufficient_storage error naming the limit.
func (c *Coordinator) filesRoom(id string, add int64) error {
	err := c.DiskRoom(id, add)
	var full *DiskFullError
	if errors.As(err, &full) {
		return sandbox.Errorf(sandbox.EInsufficientStorage, "%s", full.Error())
	}
	return err
}
