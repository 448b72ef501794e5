package coordinator

import (
	"os"
	"sync"
)

// agentLogMax is the size at which agent.log is rotated. An agent's stderr
// is for people debugging it; an agent that writes without end (a loop, a
// flood of warnings) must not fill the disk, so the log keeps at most two
// files of this size: agent.log and agent.log.1.
const agentLogMax = 10 << 20

// agentLog is an agent's stderr file, capped by rotation. Write never
// fails: an error would stop the copy from the agent's stderr pipe, and an
// agent whose stderr is not read blocks. What cannot be written is dropped.
type agentLog struct {
	mu   sync.Mutex
	path string
	max  int64
	f    *os.File // nil once a rotation failed: writes are dropped
	size int64
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
	return len(p), nil
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
