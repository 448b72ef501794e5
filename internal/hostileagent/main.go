//go:build linux

// Command hostileagent is an ACP agent that attacks its own confinement,
// for the tests of internal/confine and of serve. It speaks just enough ACP
// to boot and run a turn; what it does is with its own process, not through
// the ACP fs methods:
//
//   - on session/new it starts a lingerer (itself with the argument
//     "linger": a new session, deaf to SIGTERM, SIGINT and SIGHUP) that
//     must still die with the sandbox and with the server;
//   - on session/prompt it runs the probes its environment names, writes
//     what each did to report.json in its working directory, and ends the
//     turn.
//
// Probes, from the environment, each a comma-separated list of name=target:
//
//	HOSTILE_READ     files to read (the token, the database, /proc/PID/environ…)
//	HOSTILE_WRITE    files to create
//	HOSTILE_SEE      pids whose /proc entry it looks for
//	HOSTILE_KILL     pids to send SIGTERM
//	HOSTILE_PTRACE   pids to attach to
//	HOSTILE_DIAL     TCP addresses to connect to
//	HOSTILE_UNIX     abstract unix socket names to connect to
//	HOSTILE_LISTEN, HOSTILE_FETCH, HOSTILE_UNIXPATH  what it serves and
//	                 reaches over TCP and unix sockets (net.go)
//	HOSTILE_FORK     how many sleeping children to try to start (name=N)
//	HOSTILE_STDERR   MiB to write to stderr (name=N)
//	HOSTILE_MEMORY   MiB of memory to take, HOSTILE_FILL of tmpfs (memory.go)
//	HOSTILE_SYSCALL  syscalls a seccomp filter must deny (syscalls.go)
//	HOSTILE_CHMOD    host files to chmod, chown, touch and setxattr (modes.go)
//	HOSTILE_DISK     MiB to write into the working directory, then hold the
//	                 turn open until the server stops the agent (disk.go)
//
// The controls, always run, must succeed: write and read back a file in the
// working directory, in $HOME and in $TMPDIR, and run /bin/sh -c.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// result is one probe's outcome: OK means the operation succeeded.
type result struct {
	OK     bool   `json:"ok"`
	Err    string `json:"err,omitempty"`
	Detail string `json:"detail,omitempty"`
}

type message struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id,omitempty"`
	Method  string          `json:"method,omitempty"`
	Params  json.RawMessage `json:"params,omitempty"`
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "linger" {
		linger()
	}
	if len(os.Args) > 3 && os.Args[1] == "alloc" {
		allocMain(os.Args[2:])
	}
	in := bufio.NewReaderSize(os.Stdin, 1<<20)
	out := json.NewEncoder(os.Stdout)
	for {
		line, err := in.ReadBytes('\n')
		if err != nil {
			os.Exit(0)
		}
		var m message
		if json.Unmarshal(line, &m) != nil || m.ID == nil {
			continue
		}
		switch m.Method {
		case "initialize":
			answer(out, m.ID, map[string]any{"protocolVersion": 1, "agentCapabilities": map[string]any{}})
		case "session/new":
			startLingerer()
			answer(out, m.ID, map[string]any{"sessionId": "hostile-1"})
		case "session/prompt":
			report := probe()
			b, _ := json.MarshalIndent(report, "", "  ")
			if err := os.WriteFile("report.json", b, 0o600); err != nil {
				fmt.Fprintln(os.Stderr, "hostileagent: write report:", err)
			}
			_ = out.Encode(map[string]any{"jsonrpc": "2.0", "method": "session/update", "params": map[string]any{
				"sessionId": "hostile-1",
				"update":    map[string]any{"sessionUpdate": "agent_message_chunk", "content": map[string]any{"type": "text", "text": "probed"}},
			}})
			answer(out, m.ID, map[string]any{"stopReason": "end_turn"})
		default:
			_ = out.Encode(map[string]any{"jsonrpc": "2.0", "id": m.ID, "error": map[string]any{"code": -32601, "message": "method not found"}})
		}
	}
}

func answer(out *json.Encoder, id json.RawMessage, result any) {
	_ = out.Encode(map[string]any{"jsonrpc": "2.0", "id": id, "result": result})
}

// startLingerer starts a child that leaves the agent's process group and
// session and ignores polite signals, as a daemon an agent spawned would.
func startLingerer() {
	cmd := exec.Command("/proc/self/exe", "linger")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "hostileagent: start lingerer:", err)
		return
	}
	_ = os.WriteFile("lingerer.pid", []byte(strconv.Itoa(cmd.Process.Pid)), 0o600)
}

func linger() {
	signal.Ignore(syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	for {
		time.Sleep(time.Hour)
	}
}

// targets parses one HOSTILE_ variable.
func targets(key string) [][2]string {
	var out [][2]string
	for _, kv := range strings.Split(os.Getenv(key), ",") {
		if name, target, ok := strings.Cut(kv, "="); ok {
			out = append(out, [2]string{name, target})
		}
	}
	return out
}

func outcome(err error) result {
	if err != nil {
		return result{Err: err.Error()}
	}
	return result{OK: true}
}

func probe() map[string]result {
	r := map[string]result{}
	for _, t := range targets("HOSTILE_READ") {
		_, err := os.ReadFile(t[1])
		r["read:"+t[0]] = outcome(err)
	}
	for _, t := range targets("HOSTILE_WRITE") {
		r["write:"+t[0]] = outcome(os.WriteFile(t[1], []byte("hostile"), 0o600))
	}
	for _, t := range targets("HOSTILE_SEE") {
		_, err := os.Stat("/proc/" + t[1])
		r["see:"+t[0]] = outcome(err)
	}
	for _, t := range targets("HOSTILE_KILL") {
		pid, _ := strconv.Atoi(t[1])
		r["kill:"+t[0]] = outcome(syscall.Kill(pid, syscall.SIGTERM))
	}
	for _, t := range targets("HOSTILE_PTRACE") {
		pid, _ := strconv.Atoi(t[1])
		r["ptrace:"+t[0]] = ptrace(pid)
	}
	for _, t := range targets("HOSTILE_DIAL") {
		c, err := net.DialTimeout("tcp", t[1], 5*time.Second)
		if err == nil {
			c.Close()
		}
		r["dial:"+t[0]] = outcome(err)
	}
	for _, t := range targets("HOSTILE_UNIX") {
		c, err := net.Dial("unix", "@"+t[1])
		if err == nil {
			c.Close()
		}
		r["unix:"+t[0]] = outcome(err)
	}
	for _, t := range targets("HOSTILE_FORK") {
		n, _ := strconv.Atoi(t[1])
		r["fork:"+t[0]] = forks(n)
	}
	for _, t := range targets("HOSTILE_STDERR") {
		n, _ := strconv.Atoi(t[1])
		block := []byte(strings.Repeat("e", 1<<20-1) + "\n")
		for range n {
			os.Stderr.Write(block)
		}
		r["stderr:"+t[0]] = result{OK: true}
	}
	syscalls(r)
	memoryProbes(r)
	modeProbes(r)
	netProbes(r)
	// Processes it can see beyond itself: inside its namespace, its own.
	ents, _ := os.ReadDir("/proc")
	var pids []string
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err == nil {
			pids = append(pids, e.Name())
		}
	}
	r["list:proc"] = result{OK: true, Detail: strings.Join(pids, " ")}

	// The controls.
	for name, dir := range map[string]string{"work": ".", "home": os.Getenv("HOME"), "tmpdir": os.Getenv("TMPDIR"), "tmp": "/tmp"} {
		p := filepath.Join(dir, fmt.Sprintf("hostile-control-%d", os.Getpid()))
		err := os.WriteFile(p, []byte("mine"), 0o600)
		if err == nil {
			var b []byte
			if b, err = os.ReadFile(p); err == nil && string(b) != "mine" {
				err = fmt.Errorf("read back %q", b)
			}
			os.Remove(p)
		}
		r["control:"+name] = outcome(err)
	}
	b, err := exec.Command("/bin/sh", "-c", "echo from-sh").Output()
	if err == nil && strings.TrimSpace(string(b)) != "from-sh" {
		err = fmt.Errorf("sh said %q", b)
	}
	r["control:sh"] = outcome(err)
	r["env:home"] = result{OK: true, Detail: os.Getenv("HOME")}
	r["env:tmpdir"] = result{OK: true, Detail: os.Getenv("TMPDIR")}
	diskProbes() // last: it never returns
	return r
}

// ptrace attaches to pid and lets it go again.
func ptrace(pid int) result {
	done := make(chan result, 1)
	go func() {
		// ptrace requests must all come from the thread that attached.
		runtime.LockOSThread()
		if err := syscall.PtraceAttach(pid); err != nil {
			done <- result{Err: err.Error()}
			return
		}
		var ws syscall.WaitStatus
		_, _ = syscall.Wait4(pid, &ws, syscall.WALL, nil)
		_ = syscall.PtraceDetach(pid)
		done <- result{OK: true}
	}()
	return <-done
}

// forks starts up to n sleeping children and reports how many started.
func forks(n int) result {
	var cmds []*exec.Cmd
	var err error
	for range n {
		c := exec.Command("/bin/sleep", "60")
		if err = c.Start(); err != nil {
			break
		}
		cmds = append(cmds, c)
	}
	for _, c := range cmds {
		c.Process.Kill()
		c.Wait()
	}
	res := result{OK: err == nil, Detail: strconv.Itoa(len(cmds))}
	if err != nil {
		res.Err = err.Error()
	}
	return res
}
