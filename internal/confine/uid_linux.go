package confine

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// ownTree gives dir and everything in it to id, unless dir is id's
// already: a sandbox made by an older server, or the probe's, is chowned
// once. Symlinks are changed themselves, never followed.
func ownTree(dir string, id int) error {
	var st syscall.Stat_t
	if err := syscall.Lstat(dir, &st); err != nil {
		return err
	}
	if int(st.Uid) == id && int(st.Gid) == id {
		return nil
	}
	return filepath.WalkDir(dir, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, id, id)
	})
}

// agentIDHere is AgentID where the server is root and the id exists in its
// user namespace (the machine's own, or a container's that maps it); else
// 0: agents run as the server's uid, as they must for any other user.
func agentIDHere() int {
	if os.Geteuid() != 0 || !idMapped("/proc/self/uid_map", AgentID) || !idMapped("/proc/self/gid_map", AgentID) {
		return 0
	}
	return AgentID
}

// idMapped reports whether id is inside one of the ranges of a uid_map or
// gid_map ("inside outside count" per line).
func idMapped(file string, id int) bool {
	b, err := os.ReadFile(file)
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		var in, out, n int
		if _, err := fmt.Sscan(line, &in, &out, &n); err == nil && id >= in && id < in+n {
			return true
		}
	}
	return false
}

// agentCredential is what the launcher starts the agent as: AgentID with
// no supplementary groups, or (nil) the launcher's own uid.
func agentCredential(id int) *syscall.Credential {
	if id == 0 {
		return nil
	}
	return &syscall.Credential{Uid: uint32(id), Gid: uint32(id), Groups: []uint32{}}
}

// agentsMayWrite refuses, for a root server, write paths that AgentID
// cannot write: the agent would fail on them later with a bare EACCES.
// A server that is not root runs agents as itself, and so may they.
func agentsMayWrite(field string, paths []string, id int) error {
	if id == 0 {
		return nil
	}
	for _, p := range paths {
		var st syscall.Stat_t
		if err := syscall.Stat(p, &st); err != nil {
			return &OptionError{field, fmt.Sprintf("%q: %v", p, err)}
		}
		need := uint32(0o2)
		if st.Mode&syscall.S_IFMT == syscall.S_IFDIR {
			need = 0o3 // write and search
		}
		switch {
		case int(st.Uid) == id && st.Mode>>6&need == need,
			int(st.Gid) == id && st.Mode>>3&need == need,
			st.Mode&need == need:
		default:
			return &OptionError{field, fmt.Sprintf("%q is not writable by uid %d, which agents run as when the server is root: chown -R %d:%d %s", p, id, id, id, p)}
		}
	}
	return nil
}
