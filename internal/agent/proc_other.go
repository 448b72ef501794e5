//go:build !unix

package agent

import "os/exec"

// SetProcessGroup has no process groups to use here; KillGroup kills the
// process alone.
func SetProcessGroup(cmd *exec.Cmd) {}

// KillGroup kills the process.
func KillGroup(cmd *exec.Cmd) {
	if cmd.Process != nil {
		_ = cmd.Process.Kill()
	}
}

const openNoBlock = 0
