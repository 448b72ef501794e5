//go:build !unix

package agent

import "os/exec"

// setProcessGroup has no process groups to use here; Close kills the agent
// process alone.
func setProcessGroup(cmd *exec.Cmd) {}

func killGroup(cmd *exec.Cmd) {
	if cmd.Process != nil {
		_ = cmd.Process.Kill()
	}
}

const openNoBlock = 0
