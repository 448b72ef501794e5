package coordinator

import (
	"bytes"
	"os"
	"sync"
)

// agentLogMax is the size at which agent.log is rotated. An agent's stderr
// is for people debugging it; an agent that writes without end (a loop, a
// flood of warnings) must not fill the disk, so the log keeps at most two
// files of this size: agent.log and agent.log.1.
const agentLogMax = 10 << 20

// agentLogTail is how much of what an agent wrote since its boot the log
// keeps in memory: the end of its stderr, for the server's log when the
// boot fails (see bootFailure).
const agentLogTail = 2 << 10

// agentLog is an agent's stderr file, capped by rotation. Write never
// fails: an error would stop the copy from the agent's stderr pipe, and an
// agent whose stderr is not read blocks. What cannot be written is dropped.
type agentLog struct {
	mu   sync.Mutex
	path string
	max  int64
	f    *os.File // nil once a rotation failed: writes are dropped
	size int64
	tail []byte // the last agentLogTail bytes written since open
	cut  bool   // tail lost its beginning
}

func openAgentLog(path string, max int64) (*agentLog, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	l := &agentLog{path: path, max: max, f: f}
	if fi, err := f.Stat(); err == nil {
		l.size = fi.Size()
	}
	return l, nil
}

func (l *agentLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.size > 0 && l.size+int64(len(p)) > l.max {
		l.rotate()
	}
	if l.f != nil {
		n, _ := l.f.Write(p)
		l.size += int64(n)
	}
	if len(p) >= agentLogTail {
		l.cut = l.cut || len(l.tail) > 0 || len(p) > agentLogTail
		l.tail = append(l.tail[:0], p[len(p)-agentLogTail:]...)
	} else {
		if drop := len(l.tail) + len(p) - agentLogTail; drop > 0 {
			l.tail = append(l.tail[:0], l.tail[drop:]...)
			l.cut = true
		}
		l.tail = append(l.tail, p...)
	}
	return len(p), nil
}

// Tail returns the last lines the agent wrote since the log was opened, at
// most agentLogTail bytes of them; a line cut by that bound is left out
// unless it is the only one.
func (l *agentLog) Tail() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	t := l.tail
	if l.cut {
		if i := bytes.IndexByte(t, '\n'); i >= 0 && i+1 < len(t) {
			t = t[i+1:]
		}
	}
	return string(t)
}

// rotate moves the full log to agent.log.1, replacing the older one.
func (l *agentLog) rotate() {
	if l.f != nil {
		l.f.Close()
		l.f = nil
	}
	if err := os.Rename(l.path, l.path+".1"); err != nil && !os.IsNotExist(err) {
		return
	}
	f, err := os.OpenFile(l.path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return
	}
	l.f, l.size = f, 0
}

func (l *agentLog) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return nil
	}
	err := l.f.Close()
	l.f = nil
	return err
}
