//go:build unix

package agent

import (
	"os"
	"syscall"
)

// ownerOf is the sandbox directory's owner when the server is root and
// does not own it, else nil.
func ownerOf(root *os.Root) *fsOwner {
	if os.Geteuid() != 0 {
		return nil
	}
	fi, err := root.Stat(".")
	if err != nil {
		return nil
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || st.Uid == 0 {
		return nil
	}
	return &fsOwner{uid: int(st.Uid), gid: int(st.Gid)}
}
