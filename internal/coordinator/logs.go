package coordinator

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/sparkles-dev/sparkles/internal/agent"
	"github.com/sparkles-dev/sparkles/internal/datadir"
	"github.com/sparkles-dev/sparkles/sandbox"
	"github.com/sparkles-dev/sparkles/translate"
)

// An agent's stderr is for the people who run it, and the contract keeps it
// out of every public string (docs/events.md): a failed boot says in status_detail
// what happened and where the output is, the server's log gets its last
// lines, and the full token reads the whole file through the API, redacted
// like every string that leaves the server.

// bootFailure is the status_detail of a boot that failed with res, written
// by the server: what happened, and what to do about it. The end of the
// agent's stderr goes to the server's log, never into the detail.
func (b *box) bootFailure(res bootResult) string {
	var msg string
	var stopped *agent.StoppedError
	var exit *agent.ExitError
	var proto *agent.ProtocolError
	switch {
	case !errors.As(res.err, &stopped):
		// An agent's refusal names what it offered (see agent.AuthError):
		// the agent's words, so sanitized for status_detail as well.
		msg = b.sanitize("the agent could not start: "+res.err.Error(), maxStatusDetail-100)
		if strings.TrimSpace(res.stderr) != "" {
			msg += "; its output: `sparkles sandbox logs " + b.id + "`"
		}
	default:
		switch {
		case errors.As(stopped.Err, &exit) && exit.Code >= 0:
			msg = fmt.Sprintf("the agent exited with status %d", exit.Code)
		case errors.As(stopped.Err, &exit):
			// "agent exited: signal: killed: over its memory limit"
			msg = "the agent was ended (" + strings.TrimPrefix(exit.Error(), "agent exited: ") + ")"
		case errors.As(stopped.Err, &proto):
			msg = "the agent broke the protocol (" + proto.Error() + ")"
		default:
			msg = "the agent stopped"
		}
		msg = b.sanitize(msg, maxStatusDetail/2) + " before answering " + stopped.Step +
			"; its output: `sparkles sandbox logs " + b.id + "`"
		if b.c.cfg.Launcher != nil && exit != nil && exit.Code >= 0 {
			// What a confined agent most often lacks is its own files: a
			// script its interpreter runs, modules a wrapper loads.
			msg += "; if its files are outside the system directories, grant them with --agent-read-path or the registry's read_paths"
		}
	}
	log := b.log().With("err", res.err)
	if tail := strings.TrimSpace(res.stderr); tail != "" {
		log = log.With("stderr", b.redactLog(tail))
	}
	log.Warn("agent boot failed")
	return msg
}

// redactLog redacts what the agent wrote as the sandbox's events are
// redacted: its secrets, the operator's values, token shapes, the server's
// tokens, and the sandbox's paths. Line breaks stay.
func (b *box) redactLog(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if b.tr == nil {
		return s
	}
	return b.tr.RedactInput([]sandbox.Input{{Type: "text", Text: s}})[0].Text
}

// Reading the log through the API.
const (
	// maxLogLine bounds one line of an answer: a longer one is cut and
	// marked, the rest of it skipped. logLineSlack more is read and
	// redacted before the cut, so a secret that straddles it is still
	// recognised whole.
	maxLogLine   = 64 << 10
	logLineSlack = 4 << 10
	// logPoll is how often a follow looks for what the agent wrote since.
	logPoll = 250 * time.Millisecond
)

// logReader is a sandbox's agent log opened for a client's request: the
// rotated file first, then the current one.
type logReader struct {
	c      *Coordinator
	dir    string
	path   string // agent.log; the rotated one is path + ".1"
	redact func(string) string
}

// AgentLog opens sandbox id's agent log on this node. A sandbox whose agent
// never wrote anything answers an empty log; a deleted one keeps its log
// until retention drops the sandbox.
func (c *Coordinator) AgentLog(ctx context.Context, id string) (sandbox.AgentLog, error) {
	sb, err := c.store.Sandbox(ctx, id)
	if err != nil {
		return nil, err
	}
	if c.cfg.DataDir == "" {
		return nil, sandbox.Errorf(sandbox.EConflict, "this server keeps no agent logs: it runs without a data directory")
	}
	raw, err := c.store.Config(ctx, sb.ID)
	if err != nil {
		return nil, err
	}
	var cfg config
	if err := json.Unmarshal(raw, &cfg); err != nil {
		return nil, fmt.Errorf("decode sandbox config: %w", err)
	}
	dir := datadir.Dir(c.cfg.DataDir).Sandbox(sb.ID)
	// The translator's redactor, with the sandbox's paths: the same one
	// its events go through.
	tr := translate.New(translate.Config{
		SandboxID: sb.ID,
		Dir:       dir.Work(),
		DataDir:   c.cfg.DataDir,
		Secrets:   c.redactions(sb.ID, cfg.secrets()),
	})
	redact := func(s string) string {
		return tr.RedactInput([]sandbox.Input{{Type: "text", Text: strings.ToValidUTF8(s, "\uFFFD")}})[0].Text
	}
	return &logReader{c: c, dir: string(dir), path: dir.AgentLog(), redact: redact}, nil
}

// Copy writes the log to w, redacted line by line, and with o.Follow what
// the agent writes next until ctx or the server ends, or the sandbox's
// files are removed. A line shows once it is complete, except the last
// one of a log copied without following.
func (l *logReader) Copy(ctx context.Context, w io.Writer, o sandbox.LogOptions) error {
	cur, old := openLogs(l.path)
	defer func() {
		if cur != nil {
			cur.Close()
		}
	}()
	lw := &logLines{w: w, redact: l.redact}
	if o.Tail >= 0 {
		n, err := countLines(old, cur)
		if err != nil {
			return err
		}
		lw.skip = n - o.Tail
	}
	if old != nil {
		_, err := io.Copy(lw, old)
		old.Close()
		if err != nil {
			return err
		}
	}
	if cur != nil {
		if _, err := io.Copy(lw, cur); err != nil {
			return err
		}
	}
	if !o.Follow {
		return lw.end()
	}
	if err := flush(o); err != nil {
		return err
	}
	t := time.NewTicker(logPoll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-l.c.ctx.Done():
			return nil
		case <-t.C:
		}
		if cur == nil {
			cur, _ = os.Open(l.path)
		}
		if cur != nil {
			if _, err := io.Copy(lw, cur); err != nil {
				return err
			}
			// Rotated: what was written before the rename is in the file
			// held open, which is written no more; the rest is in the new
			// one.
			if now, err := os.Stat(l.path); err == nil {
				if was, err := cur.Stat(); err == nil && !os.SameFile(was, now) {
					_, err := io.Copy(lw, cur)
					cur.Close()
					if cur, _ = os.Open(l.path); err == nil && cur != nil {
						_, err = io.Copy(lw, cur)
					}
					if err != nil {
						return err
					}
				}
			}
		}
		if lw.wrote {
			lw.wrote = false
			if err := flush(o); err != nil {
				return err
			}
		}
		if _, err := os.Stat(l.dir); errors.Is(err, os.ErrNotExist) {
			return lw.end() // retention dropped the sandbox
		}
	}
}

func flush(o sandbox.LogOptions) error {
	if o.Flush == nil {
		return nil
	}
	return o.Flush()
}

// openLogs opens the current log, then the rotated one; a rotation in
// between would give the same file twice, so the current one is opened
// again then. Either is nil when it does not exist.
func openLogs(path string) (cur, old *os.File) {
	cur, _ = os.Open(path)
	old, _ = os.Open(path + ".1")
	if cur != nil && old != nil {
		a, err1 := cur.Stat()
		b, err2 := old.Stat()
		if err1 == nil && err2 == nil && os.SameFile(a, b) {
			cur.Close()
			cur, _ = os.Open(path)
		}
	}
	return cur, old
}

// countLines counts the lines of the files read one after the other, a
// last one without its line break included, and seeks them back.
func countLines(files ...*os.File) (int, error) {
	n, last := 0, byte('\n')
	buf := make([]byte, 64<<10)
	for _, f := range files {
		if f == nil {
			continue
		}
		for {
			k, err := f.Read(buf)
			for _, c := range buf[:k] {
				if c == '\n' {
					n++
				}
			}
			if k > 0 {
				last = buf[k-1]
			}
			if err == io.EOF {
				break
			}
			if err != nil {
				return 0, err
			}
		}
		if _, err := f.Seek(0, io.SeekStart); err != nil {
			return 0, err
		}
	}
	if last != '\n' {
		n++
	}
	return n, nil
}

// logLines splits what is written to it into lines and writes each one
// redacted, skipping the first skip of them. A line longer than
// maxLogLine is cut and marked.
type logLines struct {
	w      io.Writer
	redact func(string) string
	skip   int
	line   []byte
	long   bool // the line passed maxLogLine: the rest of it is dropped
	wrote  bool // a line was written since the last flush
}

func (l *logLines) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			l.add(p)
			return n, nil
		}
		l.add(p[:i])
		p = p[i+1:]
		if err := l.emit(true); err != nil {
			return 0, err
		}
	}
	return n, nil
}

func (l *logLines) add(p []byte) {
	if l.long {
		return
	}
	if room := maxLogLine + logLineSlack - len(l.line); len(p) > room {
		p, l.long = p[:room], true
	}
	l.line = append(l.line, p...)
}

// emit writes the line held, ended by a line break when nl is set.
func (l *logLines) emit(nl bool) error {
	line, long := l.line, l.long
	l.line, l.long = l.line[:0], false
	if l.skip > 0 {
		l.skip--
		return nil
	}
	s := l.redact(strings.TrimSuffix(string(line), "\r"))
	if long || len(s) > maxLogLine {
		if s = cut(s, maxLogLine); !strings.HasSuffix(s, "…") {
			s += "…"
		}
	}
	if nl {
		s += "\n"
	}
	l.wrote = true
	_, err := io.WriteString(l.w, s)
	return err
}

// end writes the last line if it has no line break.
func (l *logLines) end() error {
	if len(l.line) == 0 && !l.long {
		return nil
	}
	return l.emit(false)
}
