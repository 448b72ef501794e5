//go:build darwin || freebsd || netbsd

package workspace

import "syscall"

// ctime is a file's change time, which nobody can set back.
func ctime(st *syscall.Stat_t) (sec, nsec int64) {
	return int64(st.Ctimespec.Sec), int64(st.Ctimespec.Nsec)
}
