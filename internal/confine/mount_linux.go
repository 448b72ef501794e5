package confine

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"

	"golang.org/x/sys/unix"
)

// Sizes of the tmpfs mounts the launcher makes. The covers of /run and the
// home only hold the mount points of what is bound back (Landlock lets the
// agent write nothing there); /tmp and /dev/shm are the agent's own.
const (
	coverSize = "1m"
	tmpSize   = "512m"
	shmSize   = "64m"
)

// mountAll builds the agent's view of the filesystem in the launcher's new
// mount namespace, which nothing outside sees.
func mountAll(sp *spec) error {
	// Nothing mounted here may propagate back to the host, nor the host's
	// later mounts in.
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make mounts private: %w", err)
	}
	for _, m := range coverable(sp) {
		if err := cover(m, keepsUnder(sp, m)); err != nil {
			return err
		}
		if m == "/tmp" {
			sp.Write = append(sp.Write, "/tmp") // its own tmpfs now, never the host's
		}
	}
	// The namespace's own /proc: the sandbox's processes and no other.
	if err := unix.Mount("proc", "/proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("mount /proc: %w", err)
	}
	// The host's /dev/shm is shared by every process of the machine.
	if isDir("/dev/shm") {
		if err := unix.Mount("tmpfs", "/dev/shm", "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=1777,size="+shmSize); err == nil {
			sp.Write = append(sp.Write, "/dev/shm")
		}
	}
	// Pseudo-terminals of its own, for agents that run commands in one;
	// the host's devpts would give it the operator's terminals. Without a
	// devpts of its own the agent has no pty at all.
	if err := unix.Mount("devpts", "/dev/pts", "devpts", unix.MS_NOSUID|unix.MS_NOEXEC, "newinstance,ptmxmode=0666,mode=0620"); err == nil {
		if unix.Mount("/dev/pts/ptmx", "/dev/ptmx", "", unix.MS_BIND, "") == nil {
			sp.Write = append(sp.Write, "/dev/pts", "/dev/ptmx")
		}
	}
	return nil
}

// coverable is spec's masks without those inside another one (covering the
// outer one hides them already) or holding a path the agent is given whole.
func coverable(sp *spec) []string {
	given := append(append([]string{sp.Sandbox}, sp.Read...), sp.Write...)
	var out []string
	for _, m := range sp.Mask {
		if !isDir(m) || slices.ContainsFunc(given, func(g string) bool { return within(m, g) }) {
			continue
		}
		if slices.ContainsFunc(sp.Mask, func(o string) bool { return o != m && within(m, o) }) {
			continue
		}
		out = append(out, m)
	}
	return out
}

// keepsUnder lists the given paths below mask m, outermost only.
func keepsUnder(sp *spec, m string) []string {
	var keeps []string
	for _, p := range append(append([]string{sp.Sandbox, sp.Path}, sp.Read...), sp.Write...) {
		if p != m && within(p, m) {
			keeps = append(keeps, p)
		}
	}
	var out []string
	for _, k := range keeps {
		if !slices.ContainsFunc(keeps, func(o string) bool { return o != k && within(k, o) }) && !slices.Contains(out, k) {
			out = append(out, k)
		}
	}
	return out
}

// cover mounts an empty tmpfs on dir and binds keeps back at their own
// paths. Each keep is opened before the cover hides it and bound from its
// descriptor.
func cover(dir string, keeps []string) error {
	type kept struct {
		path string
		fd   int
		dir  bool
	}
	var ks []kept
	defer func() {
		for _, k := range ks {
			unix.Close(k.fd)
		}
	}()
	for _, p := range keeps {
		fd, err := unix.Open(p, unix.O_PATH|unix.O_CLOEXEC, 0)
		if err != nil {
			continue // gone: the agent will not find it either way
		}
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			unix.Close(fd)
			continue
		}
		ks = append(ks, kept{path: p, fd: fd, dir: st.Mode&unix.S_IFMT == unix.S_IFDIR})
	}
	mode := "0755"
	if dir == "/tmp" {
		mode = "1777"
	}
	size := coverSize
	if dir == "/tmp" {
		size = tmpSize
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode="+mode+",size="+size); err != nil {
		return fmt.Errorf("cover %s: %w", dir, err)
	}
	for _, k := range ks {
		if err := os.MkdirAll(filepath.Dir(k.path), 0o755); err != nil {
			return fmt.Errorf("cover %s: %w", dir, err)
		}
		if k.dir {
			if err := os.Mkdir(k.path, 0o755); err != nil && !os.IsExist(err) {
				return fmt.Errorf("cover %s: %w", dir, err)
			}
		} else if err := os.WriteFile(k.path, nil, 0o644); err != nil {
			return fmt.Errorf("cover %s: %w", dir, err)
		}
		src := "/proc/self/fd/" + strconv.Itoa(k.fd)
		if err := unix.Mount(src, k.path, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return fmt.Errorf("bind %s back: %w", k.path, err)
		}
	}
	return nil
}

func isDir(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.IsDir()
}
