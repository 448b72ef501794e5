//go:build unix

package gitsource

import (
	"os/exec"
	"syscall"
)

// setProcessGroup puts an unconfined git in a process group of its own,
// so that a timeout also ends the helpers it started (git-remote-https).
// The launcher replaces it with a session of its own, whose group is the
// same pid.
func setProcessGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
}

// killGroup kills git's whole process group; it may be gone already.
func killGroup(cmd *exec.Cmd) {
	if cmd.Process == nil || cmd.Process.Pid <= 0 {
		return
	}
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
}
