package confine_test

import (
	"syscall"

	"golang.org/x/sys/unix"
)

// archFilterCalls are the calls of filterCalls only amd64 has.
func archFilterCalls() []filterCall {
	return []filterCall{
		{"iopl", syscall.EPERM, raw(unix.SYS_IOPL, 0)},
		{"ioperm", syscall.EPERM, raw(unix.SYS_IOPERM, 0, 0, 0)},
		{"modify_ldt", syscall.EPERM, raw(unix.SYS_MODIFY_LDT, 0, 0, 0)},
		{"uselib", syscall.EPERM, raw(unix.SYS_USELIB, path(noPath))},
		{"x32:getpid", syscall.ENOSYS, raw(0x40000000 | unix.SYS_GETPID)},
	}
}
