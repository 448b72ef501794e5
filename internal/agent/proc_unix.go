//go:build unix

package agent

import (
	"os/exec"
	"syscall"
)

// SetProcessGroup puts a process in a process group of its own, so that
// stopping it also stops whatever it spawned (an agent's tools, git's
// remote helpers).
func SetProcessGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
}

// KillGroup kills the whole process group of a process started with
// SetProcessGroup. Errors are ignored: the group may already be gone.
func KillGroup(cmd *exec.Cmd) {
	if cmd.Process == nil || cmd.Process.Pid <= 0 {
		return
	}
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
}

// openNoBlock makes opening a FIFO return at once instead of waiting for a
// peer, so that an agent cannot stall the server with one; it has no effect
// on regular files.
const openNoBlock = syscall.O_NONBLOCK
