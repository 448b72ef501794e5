package translate

import (
	"math"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/sparkles-dev/sparkles/sandbox"
)

// tool is the curated state of one tool call of the turn.
type tool struct {
	state sandbox.ToolUpdated
	order int // position in announcement order, for settling in order
	// out is the output of its command, nil until it printed something.
	out *toolOutput
}

func (t *Translator) toolUpdate(now time.Time, u *rawUpdate) []*sandbox.Event {
	f, err := decodeToolFields(u)
	if err != nil {
		t.drop(DropMalformed)
		return nil
	}
	evs := t.closePart(now, nil)
	// The output goes before the status that ends its tool, so a finished
	// tool shows its final output; a tool announced by its output first.
	term := t.terminalMeta(u)
	tl, known := t.tools[f.agentID]
	if !known {
		tl, evs = t.upsertTool(now, f, evs)
		return t.output(now, tl, term, sandbox.Finished(tl.state.Status), evs)
	}
	ends := sandbox.Finished(tl.state.Status)
	if s, ok := toolStatus(deref(f.status)); ok && sandbox.Finished(s) {
		ends = true
	}
	evs = t.output(now, tl, term, ends, evs)
	_, evs = t.upsertTool(now, f, evs)
	return evs
}

// upsertTool applies an announcement or an update to the tool of its agent
// toolCallId, creating it if it was never announced, and emits tool.updated
// when the curated state changed. Fields the agent left out keep their
// values.
func (t *Translator) upsertTool(now time.Time, f toolFields, evs []*sandbox.Event) (*tool, []*sandbox.Event) {
	tl, known := t.tools[f.agentID]
	if !known {
		tl = &tool{
			state: sandbox.ToolUpdated{
				ToolCallID: t.newID(sandbox.PrefixTool),
				Kind:       sandbox.ToolKindOther,
				Status:     sandbox.ToolPending,
				Locations:  []sandbox.Location{},
			},
			order: t.toolOrder,
		}
		t.toolOrder++
		t.tools[f.agentID] = tl
	}
	was := sandbox.Finished(tl.state.Status)
	next := tl.state
	if f.title != nil {
		next.Title = t.redactBounded(*f.title, maxTitleBytes)
	}
	if f.kind != nil {
		next.Kind = toolKind(*f.kind)
	}
	if f.status != nil {
		if s, ok := toolStatus(*f.status); ok {
			next.Status = s
		}
	}
	if f.hasLocs {
		next.Locations = t.locations(f.locations)
	}
	if known && sameTool(tl.state, next) {
		return tl, evs
	}
	tl.state = next
	evs = append(evs, t.toolEvent(now, tl))
	if !was && sandbox.Finished(next.Status) {
		t.forgetFinished(f.agentID)
	}
	return tl, evs
}

// keptFinishedTools is how many finished tools of a turn the translator
// remembers, so that what it holds does not grow with the turn (a turn of
// 100,000 tool calls held 100 MiB of them). A later update of one it
// forgot, which agents do not send, shows as a new tool.
const keptFinishedTools = 1000

// forgetFinished notes that the tool of agent id agentID finished, and
// forgets the oldest finished tool past keptFinishedTools.
func (t *Translator) forgetFinished(agentID string) {
	t.finished = append(t.finished, agentID)
	if len(t.finished) <= 2*keptFinishedTools {
		return
	}
	for _, id := range t.finished[:keptFinishedTools] {
		if tl := t.tools[id]; tl != nil && sandbox.Finished(tl.state.Status) {
			delete(t.tools, id)
		}
	}
	t.finished = slices.Clone(t.finished[keptFinishedTools:])
}

func (t *Translator) toolEvent(now time.Time, tl *tool) *sandbox.Event {
	d := tl.state
	d.Locations = slices.Clone(d.Locations)
	return t.event(now, sandbox.TypeToolUpdated, &d)
}

// settleTools gives every tool still pending or running its final status
// when the turn ends (see the package documentation).
func (t *Translator) settleTools(now time.Time, turnStatus string, evs []*sandbox.Event) []*sandbox.Event {
	list := make([]*tool, 0, len(t.tools))
	for _, tl := range t.tools {
		list = append(list, tl)
	}
	slices.SortFunc(list, func(a, b *tool) int { return a.order - b.order })
	for _, tl := range list {
		st := tl.state.Status
		if st != sandbox.ToolPending && st != sandbox.ToolRunning {
			continue
		}
		switch turnStatus {
		case sandbox.TurnCanceled:
			st = sandbox.ToolCanceled
		case sandbox.TurnFailed:
			st = sandbox.ToolFailed
		default:
			if st == sandbox.ToolPending {
				st = sandbox.ToolCanceled
			} else {
				st = sandbox.ToolCompleted
			}
		}
		evs = t.endOutput(now, tl, evs)
		tl.state.Status = st
		evs = append(evs, t.toolEvent(now, tl))
	}
	return evs
}

func sameTool(a, b sandbox.ToolUpdated) bool {
	return a.Title == b.Title && a.Kind == b.Kind && a.Status == b.Status &&
		slices.EqualFunc(a.Locations, b.Locations, func(x, y sandbox.Location) bool {
			return x.Path == y.Path && (x.Line == nil) == (y.Line == nil) && (x.Line == nil || *x.Line == *y.Line)
		})
}

// toolKind maps an ACP ToolKind; switch_mode and anything unknown is other.
func toolKind(k string) string {
	switch k {
	case sandbox.ToolKindRead, sandbox.ToolKindEdit, sandbox.ToolKindDelete, sandbox.ToolKindMove,
		sandbox.ToolKindSearch, sandbox.ToolKindExecute, sandbox.ToolKindThink, sandbox.ToolKindFetch:
		return k
	}
	return sandbox.ToolKindOther
}

// toolStatus maps an ACP ToolCallStatus; an unknown one is ignored.
func toolStatus(s string) (string, bool) {
	switch s {
	case "pending":
		return sandbox.ToolPending, true
	case "in_progress":
		return sandbox.ToolRunning, true
	case "completed":
		return sandbox.ToolCompleted, true
	case "failed":
		return sandbox.ToolFailed, true
	}
	return "", false
}

// locations curates ACP locations: paths relative to the sandbox directory,
// redacted; anything outside it is left out, so no host path leaves.
func (t *Translator) locations(raw []rawLocation) []sandbox.Location {
	out := []sandbox.Location{}
	for _, l := range raw {
		if len(out) == maxLocations {
			break
		}
		rel, ok := t.relPath(l.Path)
		if !ok {
			continue
		}
		loc := sandbox.Location{Path: t.redact(rel)}
		if l.Line != nil && *l.Line >= 0 && *l.Line <= math.MaxInt32 {
			line := int(*l.Line)
			loc.Line = &line
		}
		out = append(out, loc)
	}
	return out
}

// relPath makes p relative to the sandbox directory, as given or
// symlink-resolved (agents often report realpaths). ACP paths are absolute;
// a relative one is taken as relative to the directory. Paths are judged
// lexically: the package resolves only its own directories, once, and
// symlinks inside the sandbox are the file system layer's concern.
func (t *Translator) relPath(p string) (string, bool) {
	if len(t.dirs) == 0 || p == "" || len(p) > maxPathBytes || strings.IndexByte(p, 0) >= 0 {
		return "", false
	}
	clean := filepath.Clean(p)
	if !filepath.IsAbs(p) {
		return inside(clean)
	}
	for _, dir := range t.dirs {
		if rel, err := filepath.Rel(dir, clean); err == nil {
			if rel, ok := inside(rel); ok {
				return rel, true
			}
		}
	}
	return "", false
}

// inside returns a clean relative path that does not leave its directory.
func inside(rel string) (string, bool) {
	if rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) || filepath.IsAbs(rel) {
		return "", false
	}
	return filepath.ToSlash(rel), true
}
