package bench

import (
	"fmt"
	"time"

	"golang.org/x/sys/unix"
)

// processCPU is the CPU time process pid has used so far, user and system,
// over all its threads, to the nanosecond: its CPU-time clock
// (clock_getcpuclockid(3)). /proc/PID/stat counts in 10 ms ticks, too
// coarse for a window of a few thousand events.
func processCPU(pid int) (time.Duration, error) {
	// MAKE_PROCESS_CPUCLOCK(pid, CPUCLOCK_SCHED), as glibc builds it.
	clock := int32(^pid<<3 | 2)
	var ts unix.Timespec
	if err := unix.ClockGettime(clock, &ts); err != nil {
		return 0, fmt.Errorf("the CPU clock of process %d: %w", pid, err)
	}
	return time.Duration(ts.Nano()), nil
}
