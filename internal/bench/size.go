package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"

	"github.com/sparkles-dev/sparkles/boltstore"
	"github.com/sparkles-dev/sparkles/internal/datadir"
	"github.com/sparkles-dev/sparkles/sandbox"
)

// runSize measures how the store file compares with what it holds. One
// sandbox is filled through coordinator.AppendEvents, 100 events a call,
// with turns of 20,000 tool calls of about 600 bytes each: the running
// turn's state holds every tool call, so it grows with each one, and the
// store writes it at every materialization. Once the WAL has been drained
// the file is measured against the bytes of its events (their JSON as
// served) and of the state. Then half of the log is pruned, as retention
// would, and as many events are appended again: the pages the prune freed
// should take them, so the file does not grow.
func runSize(ctx context.Context, r *runner) error {
	l, closeServer, err := r.local()
	if err != nil {
		return err
	}
	defer closeServer()
	n, turn := pick(r, 100000, 4000), pick(r, 20000, 800)
	ids, err := createSandboxes(ctx, l.coord, 1)
	if err != nil {
		return err
	}
	id := ids[0]
	g := &toolTurns{size: turn}
	r.logf("appending %d events in turns of %d tool calls", n, turn)
	if err := g.append(ctx, l, id, n); err != nil {
		return err
	}
	full, err := measureFile(ctx, l, id)
	if err != nil {
		return err
	}
	cond := fmt.Sprintf("1 sandbox, %d events appended 100 per call in turns of %d tool calls of about 600 bytes (the running turn's state holds them all), WAL drained: "+
		"%s", n, turn, full)
	const fixed = 16 << 20 // bbolt grows the file 16 MiB at a time past its pages in use
	limit := full.events*3/2 + fixed
	r.add(Figure{Name: fmt.Sprintf("file size after %d events", n), Value: mib(full.file), Unit: "MiB", Conditions: cond,
		Target: "<= 1.5 x the events + 16 MiB (bbolt's growth step)", Met: atLeast(float64(limit), float64(full.file))})
	r.add(Figure{Name: "file / events", Value: float64(full.file) / float64(full.events), Unit: "x", Conditions: "as above"})
	r.add(Figure{Name: "file / (events + state)", Value: float64(full.file) / float64(full.events+full.state), Unit: "x", Conditions: "as above"})

	h, err := l.store.Head(id)
	if err != nil {
		return err
	}
	if _, err := l.store.Prune(ctx, id, h.LastEventID/2, 1000); err != nil {
		return err
	}
	pruned, err := measureFile(ctx, l, id)
	if err != nil {
		return err
	}
	r.logf("pruned half: %s; appending %d events again", pruned, pruned.eventN)
	if err := g.append(ctx, l, id, n-pruned.eventN); err != nil {
		return err
	}
	again, err := measureFile(ctx, l, id)
	if err != nil {
		return err
	}
	growth := again.inUse - pruned.inUse
	r.add(Figure{Name: "growth of the pages in use, refilling what a prune of half freed", Value: mib(growth), Unit: "MiB",
		Conditions: fmt.Sprintf("the log pruned through its middle (%s), then as many events appended again (%s)", pruned, again),
		Target:     "<= 16 MiB (what the WAL may hold, whose values span several pages)", Met: atLeast(16<<20, float64(growth))})
	return sizeThroughAgent(ctx, r)
}

// sizeThroughAgent measures the file as a long turn leaves it through the
// whole path: an agent process announcing a new tool call with every
// update, in one turn, through the coordinator and the store of a child
// server, which is then stopped cleanly (the turn canceled, the status
// changes of the stop written). The file is then opened again and
// measured against its events.
func sizeThroughAgent(ctx context.Context, r *runner) error {
	dir, cleanup, err := r.tempDir()
	if err != nil {
		return err
	}
	defer cleanup()
	n := pick(r, int64(100000), 3000)
	r.logf("through the agent path: one turn of %d tool calls, then a clean stop", n)
	if _, err := fillLongTurn(ctx, r, dir, n); err != nil {
		return err
	}
	path := datadir.Dir(dir).Store()
	st, err := boltstore.Open(path, boltstore.Options{})
	if err != nil {
		return err
	}
	defer st.Close()
	list, _, err := st.Sandboxes(ctx, "", 1)
	if err != nil || len(list) != 1 {
		return fmt.Errorf("the long turn's store holds %d sandboxes (%v), want 1", len(list), err)
	}
	u, err := measureStore(ctx, st, path, list[0].ID)
	if err != nil {
		return err
	}
	const allowance = 8 << 20
	limit := (u.events + allowance) * 3 / 2
	r.add(Figure{Name: fmt.Sprintf("file size after %s tool calls through the agent path and a clean stop", thousands(n)), Value: mib(u.file), Unit: "MiB",
		Conditions: fmt.Sprintf("a child server whose flood agent process announced a new, completed tool call with every update in one turn, canceled, then the server stopped (SIGTERM's path); opened again and measured: %s", u),
		Target:     "<= 1.5 x (the events + 8 MiB)", Met: atLeast(float64(limit), float64(u.file))})
	r.add(Figure{Name: "file / (events + 8 MiB), through the agent path", Value: float64(u.file) / float64(u.events+allowance), Unit: "x", Conditions: "as above"})
	return nil
}

// fileUse is what the store file is and holds.
type fileUse struct {
	file, inUse, free int64 // bytes: on disk, in its pages in use, in free pages
	events, state     int64 // bytes of the events' JSON and of the state's
	eventN            int
}

func (u fileUse) String() string {
	return fmt.Sprintf("file %.1f MiB, %.1f MiB in use of which %.1f MiB free; %d events of %.1f MiB, state %.1f MiB",
		mib(u.file), mib(u.inUse), mib(u.free), u.eventN, mib(u.events), mib(u.state))
}

// measureFile drains the WAL and measures the file of l's store and what
// sandbox id holds.
func measureFile(ctx context.Context, l *local, id string) (fileUse, error) {
	return measureStore(ctx, l.store, l.path, id)
}

// measureStore is measureFile for a store opened at path.
func measureStore(ctx context.Context, store *boltstore.Store, path, id string) (fileUse, error) {
	var u fileUse
	st, err := store.Stats(ctx) // materializes the WAL first
	if err != nil {
		return u, err
	}
	fi, err := os.Stat(path)
	if err != nil {
		return u, err
	}
	u.file, u.inUse, u.free = fi.Size(), st.FileSize, int64(st.FreePages)*int64(os.Getpagesize())
	for after := uint64(0); ; {
		recs, err := store.Read(ctx, id, after, 1000)
		if err != nil {
			return u, err
		}
		if len(recs) == 0 {
			break
		}
		for _, rec := range recs {
			u.events += int64(len(rec.JSON))
		}
		u.eventN += len(recs)
		after = recs[len(recs)-1].ID
	}
	state, err := store.State(ctx, id)
	if err != nil {
		return u, err
	}
	b, err := json.Marshal(state)
	u.state = int64(len(b))
	return u, err
}

// toolTurns makes turns of tool calls, size to a turn, each call a new
// tool of about 600 bytes as the log stores it.
type toolTurns struct {
	size  int
	turns int
	calls int // in the current turn
}

func (g *toolTurns) append(ctx context.Context, l *local, id string, n int) error {
	title := strings.Repeat("t", 300)
	for n > 0 {
		evs := make([]*sandbox.Event, 0, min(n, 100))
		for len(evs) < cap(evs) {
			turn := fmt.Sprintf("turn_%06d", g.turns)
			if g.calls == 0 {
				evs = append(evs, &sandbox.Event{Type: sandbox.TypeTurnStarted, TurnID: turn, Data: &sandbox.TurnStarted{Input: sandbox.TextInput("bench")}})
			} else {
				evs = append(evs, &sandbox.Event{Type: sandbox.TypeToolUpdated, TurnID: turn, Data: &sandbox.ToolUpdated{
					ToolCallID: fmt.Sprintf("tool_%06d", g.calls), Title: title, Kind: "read", Status: "completed",
					Locations: []sandbox.Location{{Path: fmt.Sprintf("src/file_%06d.go", g.calls)}},
				}})
			}
			if g.calls++; g.calls == g.size {
				g.turns, g.calls = g.turns+1, 0
			}
		}
		if err := l.coord.AppendEvents(ctx, id, evs...); err != nil {
			return err
		}
		n -= len(evs)
	}
	return nil
}
