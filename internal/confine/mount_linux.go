package confine

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// The agent's view of the filesystem is built from nothing, as bubblewrap
// builds a sandbox's: a new root, an empty tmpfs, holds only what the agent
// is given, each at its own path, and the launcher pivots into it. What is
// not given is not there at all: the data dir (token, database, other
// sandboxes), the server user's home, the host's /tmp, /run and /var (and
// so every unix socket a daemon listens on). What is given and not the
// agent's to write is mounted read-only, so chmod, chown, utimes and xattr
// changes of host files fail with EROFS whatever the agent's uid; Landlock
// then narrows what may be opened on top of it.

// Sizes of the tmpfs mounts the launcher makes. The root and /dev only
// hold mount points, symlinks and device nodes; /tmp and /dev/shm are the
// agent's own.
const (
	rootSize = "1m"
	devSize  = "64k"
	tmpSize  = int64(512 << 20)
	shmSize  = int64(64 << 20)
)

// newRoot is where the launcher builds the agent's root before pivoting:
// any directory of the host's view will do, as nothing of the host is
// reached through a path once the sources are open.
const newRoot = "/tmp"

// hidden are procfs files that tell of the machine rather than the
// sandbox's processes: the kernel keys and their owners above all (keys
// are not namespaced), and what Docker's default masks for the same reason.
var hidden = []string{"/proc/keys", "/proc/key-users", "/proc/kcore", "/proc/timer_list", "/proc/sched_debug", "/proc/sysrq-trigger"}

// given is one path of the host that the agent sees, at the same path.
type given struct {
	path string
	fd   int  // opened (O_PATH) before the new root is mounted
	dir  bool // a directory: else a file
	rw   bool // the agent's to write
	hide bool // not a bind: an empty read-only tmpfs over a protected path
}

// mountAll builds the agent's view in the launcher's new mount namespace,
// which nothing outside sees, and pivots into it.
func mountAll(sp *spec) error {
	// Nothing mounted here may propagate back to the host, nor the host's
	// later mounts in.
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make mounts private: %w", err)
	}
	gs, links, err := gather(sp)
	defer func() {
		for _, g := range gs {
			if g.fd >= 0 {
				unix.Close(g.fd)
			}
		}
	}()
	if err != nil {
		return err
	}
	null, err := unix.Open("/dev/null", unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open /dev/null: %w", err)
	}
	defer unix.Close(null)
	resolver := -1
	if sp.Network == NetworkOpen && sp.Resolver != "" {
		if fd, err := unix.Open(sp.Resolver, unix.O_PATH|unix.O_CLOEXEC, 0); err == nil {
			resolver = fd
			defer unix.Close(fd)
		}
	}
	devs := openDevices()
	defer func() {
		for _, d := range devs {
			unix.Close(d.fd)
		}
	}()

	if err := unix.Mount("tmpfs", newRoot, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=0755,size="+rootSize); err != nil {
		return fmt.Errorf("mount the agent's root: %w", err)
	}
	at := func(p string) string { return newRoot + p }
	// The agent's own /tmp first: its sandbox may live under the host's
	// /tmp, and is then bound inside this one.
	if err := tmpfs(at("/tmp"), "1777", capped(tmpSize, sp.MemoryMax)); err != nil {
		return err
	}
	sp.Write = append(sp.Write, "/tmp")
	for _, g := range gs {
		if err := place(at(g.path), g); err != nil {
			return err
		}
	}
	if resolver >= 0 {
		if err := bindFile(resolver, at(sp.ResolverAt)); err != nil {
			return fmt.Errorf("show %s as %s: %w", sp.Resolver, sp.ResolverAt, err)
		}
	}
	for _, l := range links {
		if err := os.Symlink(l[1], at(l[0])); err != nil && !errors.Is(err, os.ErrExist) {
			return fmt.Errorf("link %s: %w", l[0], err)
		}
	}
	if !slices.ContainsFunc(gs, func(g given) bool { return within(g.path, "/var/tmp") }) {
		if err := os.MkdirAll(at("/var"), 0o755); err != nil {
			return err
		}
		_ = os.Symlink("/tmp", at("/var/tmp"))
	}
	if err := os.MkdirAll(at("/run"), 0o755); err != nil {
		return err
	}
	if err := mountProc(at("/proc"), null); err != nil {
		return err
	}
	if err := mountDev(at("/dev"), devs, sp); err != nil {
		return err
	}
	// The hidden paths and the root itself become read-only last, once
	// everything below them has its mount point.
	for _, g := range gs {
		if g.hide {
			if err := setattr(at(g.path), unix.MOUNT_ATTR_RDONLY, false); err != nil {
				return err
			}
		}
	}
	if err := setattr(newRoot, unix.MOUNT_ATTR_RDONLY|unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV, false); err != nil {
		return err
	}
	return pivot(newRoot)
}

// gather opens everything the agent is given while the host's view is
// still there, outermost first, and lists the system's top-level symlinks
// (/bin → usr/bin) to be made again.
func gather(sp *spec) ([]given, [][2]string, error) {
	byPath := map[string]*given{}
	var order []string
	add := func(p string, rw, hide bool) error {
		if g, ok := byPath[p]; ok {
			g.rw = g.rw || rw
			return nil
		}
		g := &given{path: p, fd: -1, rw: rw, hide: hide}
		if !hide {
			fd, err := unix.Open(p, unix.O_PATH|unix.O_CLOEXEC, 0)
			if err != nil {
				if !rw {
					return nil // gone: the agent will not find it either way
				}
				return fmt.Errorf("give %s: %w", p, err)
			}
			var st unix.Stat_t
			if err := unix.Fstat(fd, &st); err != nil {
				unix.Close(fd)
				return fmt.Errorf("give %s: %w", p, err)
			}
			g.fd, g.dir = fd, st.Mode&unix.S_IFMT == unix.S_IFDIR
		}
		byPath[p] = g
		order = append(order, p)
		return nil
	}
	var links [][2]string
	var ro []string
	for _, d := range append(slices.Clone(systemDirs), "/sys") {
		fi, err := os.Lstat(d)
		switch {
		case err != nil:
		case fi.Mode()&os.ModeSymlink != 0:
			if t, err := os.Readlink(d); err == nil {
				links = append(links, [2]string{d, t})
			}
		case fi.IsDir():
			ro = append(ro, d)
		}
	}
	gs := func() []given {
		out := make([]given, 0, len(order))
		for _, p := range order {
			out = append(out, *byPath[p])
		}
		return out
	}
	for _, d := range ro {
		if err := add(d, false, false); err != nil {
			return gs(), nil, err
		}
	}
	shown := func(p string) bool {
		return slices.ContainsFunc(ro, func(d string) bool { return within(p, d) })
	}
	for _, p := range sp.Read {
		if shown(p) {
			continue // seen through the system directory that holds it
		}
		if err := add(p, false, false); err != nil {
			return gs(), nil, err
		}
	}
	for _, p := range append(slices.Clone(sp.Own), sp.Write...) {
		if err := add(p, true, false); err != nil {
			return gs(), nil, err
		}
	}
	// A protected path that a read-only tree holds (a data dir under /opt)
	// is covered, so that only the sandbox's own paths show below it.
	for _, p := range sp.Protect {
		if p == "" || byPath[p] != nil {
			continue
		}
		for _, q := range order {
			if g := byPath[q]; g.dir && !g.rw && within(p, q) && p != q {
				if err := add(p, false, true); err != nil {
					return gs(), nil, err
				}
				break
			}
		}
	}
	out := gs()
	slices.SortStableFunc(out, func(a, b given) int {
		return strings.Count(a.path, "/") - strings.Count(b.path, "/")
	})
	return out, links, nil
}

// place mounts g at target in the new root.
func place(target string, g given) error {
	if g.hide {
		if err := os.MkdirAll(target, 0o755); err != nil && !isDir(target) {
			return fmt.Errorf("cover %s: %w", g.path, err)
		}
		if err := unix.Mount("tmpfs", target, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=0755,size="+rootSize); err != nil {
			return fmt.Errorf("cover %s: %w", g.path, err)
		}
		return nil
	}
	if err := mountPoint(target, g.dir); err != nil {
		return fmt.Errorf("give %s: %w", g.path, err)
	}
	src := "/proc/self/fd/" + strconv.Itoa(g.fd)
	if err := unix.Mount(src, target, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("bind %s: %w", g.path, err)
	}
	attr := uint64(unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV)
	if !g.rw {
		attr |= unix.MOUNT_ATTR_RDONLY
	}
	return setattr(target, attr, true)
}

// bindFile binds the file open as fd over target, read-only.
func bindFile(fd int, target string) error {
	if err := mountPoint(target, false); err != nil {
		return err
	}
	if err := unix.Mount("/proc/self/fd/"+strconv.Itoa(fd), target, "", unix.MS_BIND, ""); err != nil {
		return err
	}
	return setattr(target, unix.MOUNT_ATTR_RDONLY|unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV, false)
}

// mountPoint makes an empty directory or file at target, unless one is
// there already (inside a tree bound before it).
func mountPoint(target string, dir bool) error {
	if _, err := os.Lstat(target); err == nil {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
		return err
	}
	if dir {
		return os.Mkdir(target, 0o755)
	}
	return os.WriteFile(target, nil, 0o644)
}

// setattr sets mount attributes on the mount at path (and, recursively,
// the mounts below it). mount_setattr, unlike a remount, leaves the flags
// the host locked alone.
func setattr(path string, attr uint64, recursive bool) error {
	flags := uint(unix.AT_SYMLINK_NOFOLLOW)
	if recursive {
		flags |= unix.AT_RECURSIVE
	}
	if err := unix.MountSetattr(unix.AT_FDCWD, path, flags, &unix.MountAttr{Attr_set: attr}); err != nil {
		return fmt.Errorf("set mount attributes of %s: %w", strings.TrimPrefix(path, newRoot), err)
	}
	return nil
}

// capped is a tmpfs's size bounded by the agent's memory limit: what it
// holds is memory, counted against the agent, and a tmpfs larger than the
// limit only lets a writer overshoot it between two looks of the guard.
func capped(size, memoryMax int64) int64 {
	if memoryMax > 0 && memoryMax < size {
		return memoryMax
	}
	return size
}

func tmpfs(target, mode string, size int64) error {
	if err := os.MkdirAll(target, 0o755); err != nil {
		return err
	}
	if err := unix.Mount("tmpfs", target, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode="+mode+",size="+strconv.FormatInt(size, 10)); err != nil {
		return fmt.Errorf("mount %s: %w", strings.TrimPrefix(target, newRoot), err)
	}
	return nil
}

// mountProc mounts the namespace's own /proc (the sandbox's processes and
// no other), read-only, with the machine-wide files hidden under
// /dev/null.
func mountProc(target string, null int) error {
	if err := os.MkdirAll(target, 0o755); err != nil {
		return err
	}
	if err := unix.Mount("proc", target, "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("mount /proc: %w", err)
	}
	src := "/proc/self/fd/" + strconv.Itoa(null)
	for _, h := range hidden {
		p := filepath.Join(target, strings.TrimPrefix(h, "/proc"))
		if _, err := os.Lstat(p); err != nil {
			continue
		}
		if err := unix.Mount(src, p, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("hide %s: %w", h, err)
		}
		if err := setattr(p, unix.MOUNT_ATTR_RDONLY|unix.MOUNT_ATTR_NOEXEC, false); err != nil {
			return err
		}
	}
	return setattr(target, unix.MOUNT_ATTR_RDONLY, false)
}

type device struct {
	path string
	fd   int
}

// openDevices opens the host's device files the agent gets (devices).
func openDevices() []device {
	var out []device
	for _, d := range devices {
		if fd, err := unix.Open(d, unix.O_PATH|unix.O_CLOEXEC, 0); err == nil {
			out = append(out, device{d, fd})
		}
	}
	return out
}

// mountDev makes the agent's /dev: the device files it may use, its own
// pseudo-terminals (the host's devpts would give it the operator's
// terminals) and its own /dev/shm (the host's is shared by every process
// of the machine).
func mountDev(target string, devs []device, sp *spec) error {
	if err := os.MkdirAll(target, 0o755); err != nil {
		return err
	}
	if err := unix.Mount("tmpfs", target, "tmpfs", unix.MS_NOSUID|unix.MS_NOEXEC, "mode=0755,size="+devSize); err != nil {
		return fmt.Errorf("mount /dev: %w", err)
	}
	for _, d := range devs {
		p := filepath.Join(target, strings.TrimPrefix(d.path, "/dev"))
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			return err
		}
		if err := unix.Mount("/proc/self/fd/"+strconv.Itoa(d.fd), p, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind %s: %w", d.path, err)
		}
		if err := setattr(p, unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NOEXEC, false); err != nil {
			return err
		}
	}
	for name, to := range map[string]string{"fd": "/proc/self/fd", "stdin": "/proc/self/fd/0", "stdout": "/proc/self/fd/1", "stderr": "/proc/self/fd/2"} {
		if err := os.Symlink(to, filepath.Join(target, name)); err != nil {
			return err
		}
	}
	if err := tmpfs(filepath.Join(target, "shm"), "1777", capped(shmSize, sp.MemoryMax)); err != nil {
		return err
	}
	sp.Write = append(sp.Write, "/dev/shm")
	pts := filepath.Join(target, "pts")
	if err := os.Mkdir(pts, 0o755); err != nil {
		return err
	}
	// Without a devpts of its own (a kernel that refuses it in a user
	// namespace) the agent has no pty at all.
	if err := unix.Mount("devpts", pts, "devpts", unix.MS_NOSUID|unix.MS_NOEXEC, "newinstance,ptmxmode=0666,mode=0620"); err == nil {
		ptmx := filepath.Join(target, "ptmx")
		if err := os.WriteFile(ptmx, nil, 0o644); err != nil {
			return err
		}
		if unix.Mount(filepath.Join(pts, "ptmx"), ptmx, "", unix.MS_BIND, "") == nil {
			sp.Write = append(sp.Write, "/dev/pts", "/dev/ptmx")
		}
	}
	return setattr(target, unix.MOUNT_ATTR_RDONLY, false)
}

// pivot makes root the root of the launcher's mount namespace and drops
// the host's: nothing of it stays reachable, not even through "..".
func pivot(root string) error {
	if err := unix.Chdir(root); err != nil {
		return fmt.Errorf("pivot: %w", err)
	}
	// pivot_root(".", ".") stacks the old root on the new one; detaching
	// it then leaves the new root alone (pivot_root(2), NOTES).
	if err := unix.PivotRoot(".", "."); err != nil {
		return fmt.Errorf("pivot_root: %w", err)
	}
	if err := unix.Unmount(".", unix.MNT_DETACH); err != nil {
		return fmt.Errorf("detach the host's root: %w", err)
	}
	return unix.Chdir("/")
}

func isDir(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.IsDir()
}
