package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// demoPlan is what a prompt asks of the demo agent.
type demoPlan struct {
	read   string // the file the read tool reads
	named  bool   // the prompt named it (read NAME)
	write  string // the file to write; "" for none
	env    bool
	slow   bool
	hang   bool
	crash  bool
	recall bool // tell the session's turn before this one
	todo   bool // send a plan of its steps and keep it up to date
	mcp    bool // name the session's MCP servers
	usage  bool // report its usage after each step
	output bool // run a command that prints (terminal output)
	mode   bool // tell the session's mode and model
	toPlan bool // switch itself to mode plan (planmode)
}

const (
	demoSlowChunks = 100
	demoChunkWords = 4
)

func parsePrompt(text string) demoPlan {
	var p demoPlan
	fields := strings.Fields(text)
	for i, f := range fields {
		next := ""
		if i+1 < len(fields) {
			next = strings.TrimRight(strings.TrimLeft(fields[i+1], "\"'`([{<"), "\"'`.,;:!?)]}>")
		}
		// A word after read/write names a file only if it looks like one, so
		// that "write a note" still writes the default file.
		named := strings.ContainsAny(next, "./")
		switch strings.ToLower(strings.Trim(f, "\"'`.,;:!?()[]{}<>")) {
		case "read":
			if named {
				p.read, p.named = next, true
			}
		case "write":
			p.write = "notes.txt"
			if named {
				p.write = next
			}
		case "env":
			p.env = true
		case "slow":
			p.slow = true
		case "hang":
			p.hang = true
		case "crash":
			p.crash = true
		case "recall":
			p.recall = true
		case "plan":
			p.todo = true
		case "mcp":
			p.mcp = true
		case "usage":
			p.usage = true
		case "output":
			p.output = true
		case "mode":
			p.mode = true
		case "planmode":
			p.toPlan = true
		}
	}
	// Without a file to read, the agent looks at the one it is about to
	// write, as real agents do; a new sandbox is empty, so that reads as
	// empty and the read succeeds.
	switch {
	case p.read != "":
	case p.write != "":
		p.read = p.write
	default:
		p.read = "README.md"
	}
	return p
}

// demoTurn is one prompt being answered.
type demoTurn struct {
	d       *demo
	id      json.RawMessage
	session string
	cwd     string
	text    string
	attach  []string // the prompt's blocks other than text (demo_attach.go)
	plan    demoPlan
	reply   string // the reply's text, kept with the session once the turn ends
	stop    chan struct{}
	once    sync.Once
	chunks  int
}

var errDemoCancelled = errors.New("turn cancelled")

func (t *demoTurn) cancel() { t.once.Do(func() { close(t.stop) }) }

func (t *demoTurn) cancelled() bool {
	select {
	case <-t.stop:
		return true
	default:
		return false
	}
}

// run plays the script and returns the stop reason and a usage report that
// depends only on the prompt and the reply.
func (t *demoTurn) run() (string, map[string]int) {
	reason := "end_turn"
	if err := t.script(); err != nil {
		reason = "cancelled"
	}
	in := len(strings.Fields(t.text))
	return reason, map[string]int{"inputTokens": in, "outputTokens": t.chunks, "totalTokens": in + t.chunks}
}

func (t *demoTurn) script() error {
	for _, s := range []string{"Reading the request. ", "Deciding which file to look at. ", "Planning the reply."} {
		if err := t.chunk("agent_thought_chunk", s); err != nil {
			return err
		}
	}
	reply := []string{fmt.Sprintf("You asked: %q.", t.text)}
	if len(t.attach) > 0 {
		reply = append(reply, attachedText(t.attach))
	}
	if t.plan.recall {
		if e, ok := t.d.earlier(); ok {
			reply = append(reply, fmt.Sprintf("Before that you asked: %q.", e.Prompt))
		} else {
			reply = append(reply, "This is the first turn of this session.")
		}
	}
	if t.plan.mcp {
		reply = append(reply, t.d.mcpText())
	}
	if t.plan.toPlan {
		if err := t.planMode(); err != nil {
			return err
		}
	}
	if t.plan.mode {
		reply = append(reply, t.d.modeText())
	}
	steps := []demoStep{{"Read " + t.plan.read, t.readTool}}
	if t.plan.write != "" {
		steps = append(steps, demoStep{"Write " + t.plan.write, t.writeTool})
	}
	if t.plan.env {
		steps = append(steps, demoStep{"Show the environment", t.envTool})
	}
	if t.plan.output {
		steps = append(steps, demoStep{"Run a command", t.outputTool})
	}
	titles := make([]string, 0, len(steps)+1)
	for _, st := range steps {
		titles = append(titles, st.title)
	}
	titles = append(titles, "Reply")
	for i, st := range steps {
		if err := t.sendPlan(titles, i); err != nil {
			return err
		}
		s, err := st.run()
		if err != nil {
			return err
		}
		reply = append(reply, s)
		if err := t.sendUsage(); err != nil {
			return err
		}
	}
	if err := t.sendPlan(titles, len(steps)); err != nil {
		return err
	}
	reply = append(reply, "That is all from the demo agent.")
	t.reply = strings.Join(reply, " ")
	if err := t.stream(t.reply); err != nil {
		return err
	}
	if err := t.sendUsage(); err != nil {
		return err
	}
	return t.sendPlan(titles, len(titles))
}

// demoStep is one tool step of a demo turn, as its plan names it.
type demoStep struct {
	title string
	run   func() (string, error)
}

// sendPlan sends the turn's plan, when the prompt asked for one, as ACP
// agents send theirs: the whole list each time, the steps before current
// completed, current in progress.
func (t *demoTurn) sendPlan(titles []string, current int) error {
	if !t.plan.todo {
		return nil
	}
	entries := make([]map[string]string, len(titles))
	for i, title := range titles {
		status := "pending"
		switch {
		case i < current:
			status = "completed"
		case i == current:
			status = "in_progress"
		}
		priority := "medium"
		if i == 0 {
			priority = "high"
		}
		entries[i] = map[string]string{"content": title, "status": status, "priority": priority}
	}
	return t.update(map[string]any{"sessionUpdate": "plan", "entries": entries})
}

// stream sends the reply in chunks of a few words, without a messageId, as
// many real agents do.
func (t *demoTurn) stream(text string) error {
	if t.plan.hang {
		if err := t.chunk("agent_message_chunk", "Working on it... "); err != nil {
			return err
		}
		select {
		case <-t.stop:
		case <-t.d.ctx.Done():
		}
		return errDemoCancelled
	}
	if t.plan.slow {
		for i := 1; i <= demoSlowChunks; i++ {
			if err := t.chunk("agent_message_chunk", fmt.Sprintf("Step %d of %d. ", i, demoSlowChunks)); err != nil {
				return err
			}
			if err := t.pause(t.d.pause); err != nil {
				return err
			}
		}
	}
	words := strings.Fields(text)
	for i := 0; i < len(words); i += demoChunkWords {
		part := strings.Join(words[i:min(i+demoChunkWords, len(words))], " ")
		if i+demoChunkWords < len(words) {
			part += " "
		}
		if err := t.chunk("agent_message_chunk", part); err != nil {
			return err
		}
	}
	return nil
}

func (t *demoTurn) pause(d time.Duration) error {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return nil
	case <-t.stop:
		return errDemoCancelled
	case <-t.d.ctx.Done():
		return errDemoCancelled
	}
}

func (t *demoTurn) readTool() (string, error) {
	name := t.plan.read
	path := t.abs(name)
	id := t.d.nextTool()
	if err := t.update(map[string]any{
		"sessionUpdate": "tool_call", "toolCallId": id, "title": "Read " + name, "kind": "read",
		"status": "pending", "locations": []map[string]any{{"path": path}}, "rawInput": map[string]any{"path": path},
	}); err != nil {
		return "", err
	}
	if err := t.toolStatus(id, "in_progress", nil); err != nil {
		return "", err
	}
	if !t.d.can(false) {
		return fmt.Sprintf("I could not read %s: the client shares no files.", name), t.toolStatus(id, "failed", nil)
	}
	res, rpcErr, err := t.d.call("fs/read_text_file", map[string]any{"sessionId": t.session, "path": path, "line": 1, "limit": 50})
	if err != nil {
		return "", err
	}
	var r readResult
	if rpcErr != nil || json.Unmarshal(res, &r) != nil {
		return fmt.Sprintf("I could not read %s.", name), t.toolStatus(id, "failed", nil)
	}
	if err := t.toolStatus(id, "completed", map[string]any{"rawOutput": map[string]any{"content": r.Content}}); err != nil {
		return "", err
	}
	for _, l := range strings.Split(r.Content, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			if len(l) > 80 {
				l = l[:80]
			}
			return fmt.Sprintf("%s begins with %q.", name, l), nil
		}
	}
	// The client answers a missing file inside the sandbox as empty.
	switch {
	case name == t.plan.write:
		return fmt.Sprintf("%s is new or empty.", name), nil
	case !t.plan.named:
		return fmt.Sprintf("%s is empty. A new sandbox has no files: ask me to write one, e.g. \"write notes.txt\".", name), nil
	}
	return fmt.Sprintf("%s is empty.", name), nil
}

func (t *demoTurn) writeTool() (string, error) {
	name := t.plan.write
	path := t.abs(name)
	content := fmt.Sprintf("Written by the Sparkles demo agent.\nPrompt: %s\n", t.text)
	id := t.d.nextTool()
	call := map[string]any{
		"toolCallId": id, "title": "Write " + name, "kind": "edit", "status": "pending",
		"locations": []map[string]any{{"path": path}}, "rawInput": map[string]any{"path": path, "content": content},
	}
	announce := map[string]any{"sessionUpdate": "tool_call"}
	for k, v := range call {
		announce[k] = v
	}
	if err := t.update(announce); err != nil {
		return "", err
	}
	if !t.d.alwaysWrite() {
		msg, err := t.askWrite(id, name, call)
		if msg != "" || err != nil {
			return msg, err
		}
	}
	if err := t.toolStatus(id, "in_progress", nil); err != nil {
		return "", err
	}
	if !t.d.can(true) {
		return fmt.Sprintf("I could not write %s: the client shares no files.", name), t.toolStatus(id, "failed", nil)
	}
	_, rpcErr, err := t.d.call("fs/write_text_file", map[string]any{"sessionId": t.session, "path": path, "content": content})
	if err != nil {
		return "", err
	}
	if rpcErr != nil {
		return fmt.Sprintf("I could not write %s.", name), t.toolStatus(id, "failed", nil)
	}
	return fmt.Sprintf("I wrote %s.", name), t.toolStatus(id, "completed", nil)
}

func (t *demoTurn) envTool() (string, error) {
	id := t.d.nextTool()
	env := append([]string{}, t.d.env...)
	if err := t.update(map[string]any{
		"sessionUpdate": "tool_call", "toolCallId": id, "title": "Read the environment", "kind": "other",
		"status": "in_progress", "rawInput": map[string]any{"env": env},
	}); err != nil {
		return "", err
	}
	if err := t.toolStatus(id, "completed", nil); err != nil {
		return "", err
	}
	if len(env) == 0 {
		return "My environment is empty.", nil
	}
	return "My environment: " + strings.Join(env, " ") + ".", nil
}

// outputTool runs a pretend "env" that prints a coloured header, the
// environment and a coloured footer, in two chunks, and exits 0. Only a
// client that takes terminal output gets what it printed, as
// claude-agent-acp and codex-acp send it: terminal_info with the tool call,
// terminal_output with each chunk, terminal_exit with the status.
func (t *demoTurn) outputTool() (string, error) {
	id := t.d.nextTool()
	t.d.mu.Lock()
	term := t.d.termOut
	t.d.mu.Unlock()
	call := map[string]any{
		"sessionUpdate": "tool_call", "toolCallId": id, "title": "env", "kind": "execute", "status": "in_progress",
	}
	if term {
		call["content"] = []any{map[string]any{"type": "terminal", "terminalId": id}}
		call["_meta"] = map[string]any{"terminal_info": map[string]any{"terminal_id": id}}
	}
	if err := t.update(call); err != nil {
		return "", err
	}
	chunks := []string{
		"\x1b[1;32m$ env\x1b[0m\r\n",
		strings.Join(t.d.env, "\n") + "\n\x1b[32mdone\x1b[0m\n",
	}
	for _, c := range chunks {
		if !term {
			break
		}
		if err := t.update(map[string]any{
			"sessionUpdate": "tool_call_update", "toolCallId": id,
			"_meta": map[string]any{"terminal_output": map[string]any{"terminal_id": id, "data": c}},
		}); err != nil {
			return "", err
		}
	}
	var exit map[string]any
	if term {
		exit = map[string]any{"_meta": map[string]any{"terminal_exit": map[string]any{"terminal_id": id, "exit_code": 0, "signal": nil}}}
	}
	if err := t.toolStatus(id, "completed", exit); err != nil {
		return "", err
	}
	return "I ran env.", nil
}

func (t *demoTurn) abs(name string) string {
	if filepath.IsAbs(name) {
		return filepath.Clean(name)
	}
	return filepath.Join(t.cwd, name)
}

func (t *demoTurn) chunk(kind, text string) error {
	if kind == "agent_message_chunk" {
		t.chunks++
	}
	return t.update(map[string]any{"sessionUpdate": kind, "content": map[string]string{"type": "text", "text": text}})
}

func (t *demoTurn) toolStatus(id, status string, extra map[string]any) error {
	u := map[string]any{"sessionUpdate": "tool_call_update", "toolCallId": id, "status": status}
	for k, v := range extra {
		u[k] = v
	}
	return t.update(u)
}

// update sends a session update unless the turn was cancelled, which is where
// a cancelled turn stops.
func (t *demoTurn) update(u map[string]any) error {
	if t.cancelled() {
		return errDemoCancelled
	}
	return t.send(u)
}

func (t *demoTurn) send(u map[string]any) error {
	return t.d.notify(map[string]any{"sessionId": t.session, "update": u})
}

func (d *demo) nextTool() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.tools++
	return fmt.Sprintf("call_%d", d.tools)
}

// can reports whether the client advertised file reads (or writes).
func (d *demo) can(write bool) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if write {
		return d.canWrite
	}
	return d.canRead
}

// askWrite asks the user for permission to write name, as real agents do,
// until the user allows it always. It returns "" and nil when the write may
// go on, else what to answer and how the tool ends.
func (t *demoTurn) askWrite(id, name string, call map[string]any) (string, error) {
	res, rpcErr, err := t.d.call("session/request_permission", map[string]any{
		"sessionId": t.session,
		"toolCall":  call,
		"options": []map[string]string{
			// Listed as Claude Code and Gemini CLI list theirs, the always
			// option first, so that nothing may take the first allow for
			// a single approval.
			{"optionId": "allow_always", "name": "Always allow writes", "kind": "allow_always"},
			{"optionId": "allow_once", "name": "Allow", "kind": "allow_once"},
			{"optionId": "reject_once", "name": "Reject", "kind": "reject_once"},
		},
	})
	if err != nil {
		return "", err
	}
	var out struct {
		Outcome struct {
			Outcome  string `json:"outcome"`
			OptionID string `json:"optionId"`
		} `json:"outcome"`
	}
	if rpcErr != nil || json.Unmarshal(res, &out) != nil {
		return fmt.Sprintf("I could not ask to write %s.", name), t.toolStatus(id, "failed", nil)
	}
	switch {
	case out.Outcome.Outcome == "cancelled":
		// The failed status still goes out: the tool call must not hang open.
		_ = t.send(map[string]any{"sessionUpdate": "tool_call_update", "toolCallId": id, "status": "failed"})
		return "", errDemoCancelled
	case out.Outcome.Outcome == "selected" && out.Outcome.OptionID == "allow_always":
		t.d.mu.Lock()
		t.d.always = true
		t.d.mu.Unlock()
	case out.Outcome.Outcome != "selected" || out.Outcome.OptionID != "allow_once":
		return fmt.Sprintf("You did not let me write %s.", name), t.toolStatus(id, "failed", nil)
	}
	return "", nil
}

func (d *demo) alwaysWrite() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.always
}

// mcpText names the session's MCP servers and their transports: the demo
// connects to none, and tells nothing of their env or headers, whose
// values are the sandbox's secrets.
func (d *demo) mcpText() string {
	d.mu.Lock()
	servers := d.mcp
	d.mu.Unlock()
	if len(servers) == 0 {
		return "I was given no MCP servers."
	}
	names := make([]string, len(servers))
	for i, s := range servers {
		kind := s.Type
		if kind == "" {
			kind = "stdio"
		}
		names[i] = fmt.Sprintf("%s (%s)", s.Name, kind)
	}
	return "My MCP servers: " + strings.Join(names, ", ") + "."
}
