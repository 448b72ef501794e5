//go:build !linux

package confine

import "errors"

// Grants: no agent is confined off Linux (see the Linux build).
func (*Launcher) Grants([]string) ([]string, error) {
	return nil, errors.New("agent confinement needs Linux")
}

// CheckCommandLine: nothing is refused where nothing is confined.
func (*Launcher) CheckCommandLine([]string) error { return nil }
