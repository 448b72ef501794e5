package coordinator

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/sparkles-dev/sparkles/internal/datadir"
	"github.com/sparkles-dev/sparkles/internal/disk"
	"github.com/sparkles-dev/sparkles/sandbox"
	"github.com/sparkles-dev/sparkles/translate"
)

// The disk guard. An agent writes its sandbox's work, home and tmp
// directories, on the disk that also holds the event store; nothing in
// the kernel bounds that without quotas the data dir's file system may
// not have. So the coordinator looks:
//
//   - Config.SandboxDiskMax (--sandbox-disk-max) bounds the bytes of one
//     sandbox's work, home and tmp. An agent past it is stopped, its
//     running turn fails with sandbox.error disk_full, and a new turn is
//     refused (409 conflict) until files are removed and it is under the
//     limit again.
//   - Config.DiskReserve (--disk-reserve) is free space under the data dir
//     that agents never get. Below it every agent of this node is stopped
//     (any of them may be the one writing, and something else may be),
//     their turns fail with disk_full, and new turns are refused (503
//     unavailable) until there is room again. Creates, deletes, reads and
//     the event log go on: the reserve is what the store writes into
//     while agents are stopped. The events that tell of the stop (a
//     sandbox.error, the turn's end, the status: a few KiB per sandbox)
//     are what must fit first; beyond them the reserve covers what agents
//     write between two looks (diskTick at the disk's write speed: 1 GiB
//     is a second of a fast NVMe disk) and the store's growth.
//
// It is a polling guard, the kind that works without quotas or a
// delegated cgroup: free space is asked every diskTick (one statfs, a few
// µs), and the sandboxes whose agent runs (only they write) are walked at
// most every diskTick, or less often as the walks grow: after a pass that
// took d, the next waits at least walkCost×d, so the guard never spends
// more than 1/walkCost of one core. A walk costs ~3 µs of CPU per file
// (a 10,000-file workspace in 29-32 ms, BenchmarkUsage in internal/disk
// on a 2-core VM; `du -s` takes as long), so one such sandbox is walked
// every second for 3% of a core, and 64 of them every ~40 s. Between two
// looks an agent can write past a limit by what it writes in that time;
// the reserve absorbs that.

// diskFull is the sandbox.error code of a stop for a disk limit (docs/errors.md).
const diskFull = sandbox.ErrDiskFull

const (
	// diskTick is how often the guard asks for free space, and the
	// shortest time between two walks of the running sandboxes.
	diskTick = time.Second
	// walkCost bounds the guard to 1/walkCost of one core: after a pass
	// of walks that took d, the next waits at least walkCost×d.
	walkCost = 20
)

// Flags of the limits, named in messages so that an operator knows what
// to change.
const (
	flagSandboxDiskMax = "--sandbox-disk-max"
	flagDiskReserve    = "--disk-reserve"
)

// DiskFullError is a disk limit that a sandbox reached: Flag names it
// (--sandbox-disk-max or --disk-reserve), Limit is its value in bytes,
// and Used the sandbox's bytes (for --sandbox-disk-max) or the free bytes
// left (for --disk-reserve). See Coordinator.DiskRoom.
type DiskFullError struct {
	Flag  string
	Limit int64
	Used  int64
}

func (e *DiskFullError) Error() string {
	if e.Flag == flagDiskReserve {
		return fmt.Sprintf("the data dir's disk has %s free, less than the %s reserve kept for the event log (%s)",
			bytesText(e.Used), bytesText(e.Limit), e.Flag)
	}
	return fmt.Sprintf("the sandbox's files take %s, more than its %s limit (%s)", bytesText(e.Used), bytesText(e.Limit), e.Flag)
}

// bytesText writes n in binary units, as the flags take them.
func bytesText(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d bytes", n)
}

// diskGuard is what the guard knows. Boxes tell it whether their agent
// runs (setRunning, from setConn); the guard's loop and the checks of
// requests read it.
type diskGuard struct {
	mu      sync.Mutex
	running map[string]bool  // sandboxes of this node whose agent runs
	used    map[string]int64 // each sandbox's bytes at its last walk
	partial map[string]bool  // sandboxes whose last walk could not read everything (logged once)
	low     bool             // free space was below the reserve at the last look
	blind   bool             // free space could not be asked at the last look (logged once)
}

func (g *diskGuard) setRunning(id string, running bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.running == nil {
		g.running = map[string]bool{}
	}
	if running {
		g.running[id] = true
	} else {
		delete(g.running, id)
	}
}

// forget drops what the guard knows of a deleted sandbox.
func (g *diskGuard) forget(id string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.running, id)
	delete(g.used, id)
	delete(g.partial, id)
}

func (g *diskGuard) runningIDs() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	ids := make([]string, 0, len(g.running))
	for id := range g.running {
		ids = append(ids, id)
	}
	return ids
}

// startDiskGuard runs the guard's loop when a limit is set and there are
// agents to write.
func (c *Coordinator) startDiskGuard() {
	if c.cfg.SandboxDiskMax <= 0 && c.cfg.DiskReserve <= 0 {
		return
	}
	c.loop(c.guardDisk)
}

func (c *Coordinator) guardDisk(ctx context.Context) {
	tick := time.NewTicker(diskTick)
	defer tick.Stop()
	var nextWalk time.Time
	for {
		c.checkReserve(ctx)
		if c.cfg.SandboxDiskMax > 0 && !time.Now().Before(nextWalk) {
			start := time.Now()
			c.checkSandboxes(ctx)
			nextWalk = start.Add(max(diskTick, walkCost*time.Since(start)))
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// checkReserve stops every running agent while free space is below the
// reserve.
func (c *Coordinator) checkReserve(ctx context.Context) {
	if c.cfg.DiskReserve <= 0 {
		return
	}
	err := c.reserveRoom(0)
	if err == nil {
		return
	}
	full, ok := err.(*DiskFullError)
	if !ok {
		return // logged by reserveRoom
	}
	// All at once: each stop may wait out an agent's grace.
	var wg sync.WaitGroup
	for _, id := range c.disk.runningIDs() {
		wg.Go(func() { c.stopForDisk(ctx, id, full) })
	}
	wg.Wait()
}

// reserveRoom returns a *DiskFullError when add more bytes would leave
// less free space under the data dir than the reserve, and logs each
// crossing of the reserve, down and up. A statfs that fails is logged and
// lets everything through: the store's own refusals still stand.
func (c *Coordinator) reserveRoom(add int64) error {
	if c.cfg.DiskReserve <= 0 {
		return nil
	}
	free, err := disk.Free(c.cfg.DataDir)
	c.disk.mu.Lock()
	if err != nil && !c.disk.blind {
		c.log.Warn("disk guard: cannot ask the data dir's free space; the reserve is not checked until it can", "err", err)
	}
	c.disk.blind = err != nil
	c.disk.mu.Unlock()
	if err != nil {
		return err
	}
	low := free-add < c.cfg.DiskReserve
	if add == 0 {
		c.disk.mu.Lock()
		was := c.disk.low
		c.disk.low = low
		c.disk.mu.Unlock()
		switch {
		case low && !was:
			c.log.Error("the data dir's disk is below its reserve: agents are stopped and turns refused until there is room",
				"free_bytes", free, "reserve_bytes", c.cfg.DiskReserve)
		case !low && was:
			c.log.Info("the data dir's disk has room above its reserve again", "free_bytes", free, "reserve_bytes", c.cfg.DiskReserve)
		}
	}
	if !low {
		return nil
	}
	return &DiskFullError{Flag: flagDiskReserve, Limit: c.cfg.DiskReserve, Used: free}
}

// checkSandboxes walks each sandbox whose agent runs and stops those past
// the workspace limit.
func (c *Coordinator) checkSandboxes(ctx context.Context) {
	for _, id := range c.disk.runningIDs() {
		if ctx.Err() != nil {
			return
		}
		used := c.measure(id)
		if used > c.cfg.SandboxDiskMax {
			c.stopForDisk(ctx, id, &DiskFullError{Flag: flagSandboxDiskMax, Limit: c.cfg.SandboxDiskMax, Used: used})
		}
	}
}

// workDirs are the directories of a sandbox that grow with what its
// agent writes: its work, home and tmp, and the snapshot store that keeps
// what each turn changed (workspace.go), which the sandbox's limit counts
// too so that an agent's files cannot grow the disk twice over.
func (c *Coordinator) workDirs(id string) []string {
	dir := datadir.Dir(c.cfg.DataDir).Sandbox(id)
	return []string{dir.Work(), dir.Home(), dir.Tmp(), dir.Snapshots()}
}

// measure walks a sandbox's directories and keeps the count. What the
// walk could not read (a directory an agent made unreadable to a server
// that is not root) is left out of the count, and logged once: it still
// counts against the reserve, which asks the file system.
func (c *Coordinator) measure(id string) int64 {
	used, err := disk.Usage(c.workDirs(id)...)
	g := &c.disk
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.used == nil {
		g.used, g.partial = map[string]int64{}, map[string]bool{}
	}
	g.used[id] = used
	if err != nil && !g.partial[id] {
		c.log.Warn("disk guard: part of a sandbox's files could not be measured; they count against the reserve only",
			"sandbox_id", id, "err", err)
	}
	g.partial[id] = err != nil
	return used
}

// stopForDisk stops the agent of sandbox id for a disk limit.
func (c *Coordinator) stopForDisk(ctx context.Context, id string, why *DiskFullError) {
	b := c.existingBox(id)
	if b == nil {
		return
	}
	_ = b.do(ctx, func() { b.diskFull(why) })
}

// diskFull stops the agent for a disk limit as a turn timeout does: the
// agent first, so that it writes no more, then the turn ends failed with
// disk_full (canceled when the user had canceled it, as the user's cancel
// decides whatever happens after it).
func (b *box) diskFull(why *DiskFullError) {
	if b.conn == nil || b.deleted {
		return // stopped meanwhile
	}
	msg := why.Error() + "; the agent was stopped"
	b.log().Warn("stopping the agent: a disk limit is reached", "limit", why.Flag, "limit_bytes", why.Limit, "bytes", why.Used)
	res := translate.TurnResult{Err: &sandbox.ErrorInfo{Code: diskFull, Message: msg}}
	if b.turn != nil && b.turn.canceled {
		res = translate.TurnResult{Canceled: true}
	}
	b.stopAgent()
	evs := b.tr.Error(sandbox.ErrInternal, msg)
	for _, ev := range evs {
		if d, ok := ev.Data.(*sandbox.SandboxError); ok {
			d.Code = diskFull // translate knows the codes of the agent's side only
		}
	}
	evs = b.endTurn(res, evs...)
	detail := msg + "; it starts again with a turn once there is room"
	b.setStatus(sandbox.StatusStopped, detail, evs...)
}

// admitDisk is the disk's say on a new turn of sandbox id: refused while
// the data dir's disk is below the reserve (503, the server's condition,
// gone once there is room) or while the sandbox is past its workspace
// limit (409, the sandbox's own, until files are removed). The last walk
// answers unless it found the sandbox past the limit or there was none:
// then it is walked now, so that a sandbox whose files were removed runs
// again at once.
func (c *Coordinator) admitDisk(id string) error {
	if err := c.reserveRoom(0); err != nil {
		if full, ok := err.(*DiskFullError); ok {
			return sandbox.Errorf(sandbox.EUnavailable, "%s; turns start again once there is room", full.Error())
		}
	}
	if limit := c.cfg.SandboxDiskMax; limit > 0 {
		c.disk.mu.Lock()
		used, ok := c.disk.used[id]
		c.disk.mu.Unlock()
		if !ok || used > limit {
			used = c.measure(id)
		}
		if used > limit {
			full := &DiskFullError{Flag: flagSandboxDiskMax, Limit: limit, Used: used}
			return sandbox.Errorf(sandbox.EConflict, "sandbox %s: %s; remove files from its workspace to run turns again", id, full.Error())
		}
	}
	return nil
}

// DiskRoom reports whether sandbox id has room for add more bytes: nil,
// or a *DiskFullError that names the limit in the way (the sandbox's
// workspace limit or the data dir's reserve). It walks the sandbox's
// files now. What writes into a workspace for a client (an upload) asks
// it first, and answers a *DiskFullError 507 Insufficient Storage.
func (c *Coordinator) DiskRoom(id string, add int64) error {
	if err := c.reserveRoom(add); err != nil {
		if _, ok := err.(*DiskFullError); ok {
			return err
		}
	}
	if limit := c.cfg.SandboxDiskMax; limit > 0 {
		if used := c.measure(id); used+add > limit {
			return &DiskFullError{Flag: flagSandboxDiskMax, Limit: limit, Used: used}
		}
	}
	return nil
}

// removeFiles removes what the sandbox's agent wrote (work, home, tmp) at
// once, whatever modes it left; agent.log stays for whoever debugs the
// agent until retention drops the sandbox. It runs once the agent is
// gone, so nothing writes there any more.
func (b *box) removeFiles() {
	for _, dir := range b.c.workDirs(b.id) {
		if err := disk.RemoveAll(dir); err != nil {
			b.log().Error("delete: the sandbox's files could not all be removed; retention tries again when it drops the sandbox", "err", err)
		}
	}
	b.c.disk.forget(b.id)
}

// deletedView is the answer to a delete whose record waits for the store:
// the sandbox as it is now, deleted, though the store does not say so yet.
func (b *box) deletedView(sb sandbox.Sandbox) sandbox.Sandbox {
	sb.Status = sandbox.StatusDeleted
	sb.StatusDetail = "deleted by request; the agent is stopped and its files are removed, and the record of the delete is written once the event store takes writes again"
	sb.CurrentTurn = nil
	sb.UpdatedAt = b.c.now()
	return sb
}
