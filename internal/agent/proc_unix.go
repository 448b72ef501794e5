//go:build unix

package agent

import (
	"os/exec"
	"syscall"
)

// setProcessGroup puts the agent in a process group of its own, so that
// stopping it also stops whatever it spawned.
func setProcessGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
}

// killGroup kills the agent's whole process group. Errors are ignored: the
// group may already be gone.
func killGroup(cmd *exec.Cmd) {
	if cmd.Process == nil || cmd.Process.Pid <= 0 {
		return
	}
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
}

// openNoBlock makes opening a FIFO return at once instead of waiting for a
// peer, so that an agent cannot stall the server with one; it has no effect
// on regular files.
const openNoBlock = syscall.O_NONBLOCK
