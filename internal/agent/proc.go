package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// proc is the agent being run: a process, or a function in this process.
type proc struct {
	pid  int               // 0 for an agent in this process
	kill func()            // ends the agent at once; safe to repeat
	wait func() *ExitError // blocks until the agent has ended
}

// Launcher starts agent processes confined to their sandbox
// (internal/confine implements it).
type Launcher interface {
	// Start starts cmd, whose only writable place is the directory
	// sandbox, in place of cmd.Start, with what the agent's own settings
	// add (extra); release is called once cmd has been waited for.
	Start(cmd *exec.Cmd, sandbox string, extra Confinement) (release func(), err error)
}

// exitReasoner is a Launcher that says why its limits stopped an agent
// (over its memory limit), once cmd has been waited for.
type exitReasoner interface {
	ExitReason(cmd *exec.Cmd) string
}

// Confinement is what one agent's registry entry adds to the server-wide
// confinement: its network ("open" or "none"; empty keeps the server's),
// paths it may read, or read and write, beyond its sandbox, and ports of
// the host's loopback it may reach.
type Confinement struct {
	Network               string
	ReadPaths, WritePaths []string
	HostPorts             []int
}

// startCommand runs the agent as a process in a process group of its own,
// through cfg.Launcher when there is one. The agent's ends of the pipes are
// closed here once the child holds them.
func startCommand(cfg Config, dir, path string, env []string, stdin, stdout *os.File, grace time.Duration) (*proc, error) {
	cmd := &exec.Cmd{
		Path:      path,
		Args:      cfg.Command,
		Dir:       dir,
		Env:       env,
		Stdin:     stdin,
		Stdout:    stdout,
		Stderr:    cfg.Stderr,
		WaitDelay: grace, // bounds the copy of stderr held open by the agent's children
	}
	SetProcessGroup(cmd)
	release, err := func() {}, error(nil)
	if cfg.Launcher != nil {
		sandbox := cfg.Sandbox
		if sandbox == "" {
			sandbox = dir
		}
		release, err = cfg.Launcher.Start(cmd, sandbox, cfg.Confinement)
	} else {
		err = cmd.Start()
	}
	stdin.Close()
	stdout.Close()
	if err != nil {
		return nil, err
	}
	return &proc{
		pid:  cmd.Process.Pid,
		kill: func() { KillGroup(cmd) },
		wait: func() *ExitError {
			err := cmd.Wait()
			release()
			exit := &ExitError{Code: -1, state: fmt.Sprint(err)}
			if st := cmd.ProcessState; st != nil {
				exit = &ExitError{Code: st.ExitCode(), state: st.String()}
			}
			if r, ok := cfg.Launcher.(exitReasoner); ok {
				exit.Reason = r.ExitReason(cmd)
			}
			return exit
		},
	}, nil
}

// startFunc runs an agent in this process, over real pipes so that it is
// driven exactly as a process is. Its exit status follows the CLI's: 0 when
// it returns nil, 3 for ErrCrash, 2 for a panic, 1 for any other error.
func startFunc(run func(context.Context, io.Reader, io.Writer, []string) error, env []string, stdin, stdout *os.File) *proc {
	ctx, cancel := context.WithCancel(context.Background())
	// Closing the agent's ends unblocks it when it is stuck on a pipe.
	stop := func() {
		cancel()
		stdin.Close()
		stdout.Close()
	}
	ended := make(chan *ExitError, 1)
	go func() {
		code := 2
		defer func() {
			recover() // a panicking agent is an agent that exited, not a server crash
			stop()
			ended <- &ExitError{Code: code, state: fmt.Sprintf("exit status %d", code)}
		}()
		err := run(ctx, stdin, stdout, env)
		switch {
		case err == nil:
			code = 0
		case errors.Is(err, ErrCrash):
			code = 3
		default:
			code = 1
		}
	}()
	return &proc{
		kill: stop,
		wait: func() *ExitError { return <-ended },
	}
}

// lookPath finds the agent command on the server's PATH: the operator's
// choice of programs, never the PATH of the agent's environment, which a
// sandbox's env sets (a sandbox must not choose what the server runs).
// Relative PATH entries are refused (exec.ErrDot).
func lookPath(name string) (string, error) {
	if strings.ContainsRune(name, filepath.Separator) {
		return name, nil
	}
	return exec.LookPath(name)
}
