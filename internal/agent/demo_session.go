package agent

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
)

// demoEntry is one finished turn of a demo session, as the demo keeps it.
type demoEntry struct {
	Prompt string `json:"prompt"`
	Reply  string `json:"reply"`
}

// demoDir is where the demo keeps its sessions, in its HOME as real
// agents keep theirs (in its working directory when it has no HOME), so
// that they are not part of the workspace a turn changes.
const demoDir = ".sparkles-demo"

// codeResourceNotFound is ACP's error for an unknown resource.
const codeResourceNotFound = -32002

var demoSessionRe = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`^demo-session-[0-9a-f]{16}$`)
})

// newDemoSession returns a session id that no other demo process makes:
// sessions outlive the process that opened them.
func newDemoSession() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return "demo-session-" + hex.EncodeToString(b)
}

func (d *demo) sessionFile(cwd, id string) string {
	return filepath.Join(d.stateDir(cwd), id+".jsonl")
}

// stateDir is where the demo keeps its sessions: under HOME when its
// environment has one, else under its working directory.
func (d *demo) stateDir(cwd string) string {
	for _, kv := range d.env {
		if home, ok := strings.CutPrefix(kv, "HOME="); ok && filepath.IsAbs(home) {
			return filepath.Join(home, demoDir)
		}
	}
	return filepath.Join(cwd, demoDir)
}

// load answers session/load: it reads the session's turns, replays them as
// a real agent does (each prompt as user_message_chunk, each reply as
// agent_message_chunk), then answers with its modes and models and goes on with that session.
func (d *demo) load(m *message) error {
	var p loadSessionParams
	if json.Unmarshal(m.Params, &p) != nil || !filepath.IsAbs(p.Cwd) {
		return d.fail(m.ID, codeInvalidParams, "session/load needs an absolute cwd")
	}
	if !demoSessionRe().MatchString(p.SessionID) {
		return d.fail(m.ID, codeResourceNotFound, "no such session")
	}
	b, err := os.ReadFile(d.sessionFile(p.Cwd, p.SessionID))
	if errors.Is(err, fs.ErrNotExist) {
		return d.fail(m.ID, codeResourceNotFound, "no such session")
	}
	if err != nil {
		return d.fail(m.ID, codeInternal, "the session cannot be read")
	}
	var history []demoEntry
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, 4*DefaultMaxLine)
	for sc.Scan() {
		var e demoEntry
		if json.Unmarshal(sc.Bytes(), &e) == nil {
			history = append(history, e)
		}
	}
	for _, e := range history {
		for _, c := range [][2]string{{"user_message_chunk", e.Prompt}, {"agent_message_chunk", e.Reply}} {
			if c[1] == "" {
				continue
			}
			if err := d.notify(map[string]any{"sessionId": p.SessionID, "update": map[string]any{
				"sessionUpdate": c[0], "content": map[string]string{"type": "text", "text": c[1]},
			}}); err != nil {
				return err
			}
		}
	}
	d.mu.Lock()
	d.session, d.cwd, d.tools, d.history = p.SessionID, p.Cwd, 0, history
	d.mcp = p.MCPServers
	d.mu.Unlock()
	return d.reply(m.ID, d.sessionAnswer(""))
}

// remember adds a finished turn to the session, in memory and on disk. A
// directory it cannot write loses the session's history for later
// processes, as a full disk would for a real agent; the turn still ends.
func (d *demo) remember(e demoEntry) {
	d.mu.Lock()
	d.history = append(d.history, e)
	cwd, id := d.cwd, d.session
	d.mu.Unlock()
	line, err := json.Marshal(e)
	if err != nil {
		return
	}
	if err := os.MkdirAll(d.stateDir(cwd), 0o700); err != nil {
		return
	}
	f, err := os.OpenFile(d.sessionFile(cwd, id), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return
	}
	defer f.Close()
	_, _ = f.Write(append(line, '\n'))
}

// earlier returns the session's last finished turn, if any.
func (d *demo) earlier() (demoEntry, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.history) == 0 {
		return demoEntry{}, false
	}
	return d.history[len(d.history)-1], true
}
