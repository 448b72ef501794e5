//go:build !linux

package bench

import (
	"errors"
	"time"
)

// processCPU needs Linux's process CPU-time clocks.
func processCPU(int) (time.Duration, error) {
	return 0, errors.New("reading another process's CPU time needs Linux")
}
