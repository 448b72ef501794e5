//go:build linux

package confine_test

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"unsafe"

	seccomp "github.com/elastic/go-seccomp-bpf"
	"github.com/elastic/go-seccomp-bpf/arch"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"

	"github.com/sparkles-dev/sparkles/internal/confine"
)

// syscallProbes is every probe of the hostile agent's HOSTILE_SYSCALL;
// keyring is the server user's keyring, for the keyring probe to go for
// beside what /proc/keys shows it.
func syscallProbes(keyring int) string {
	return "keyring=" + strconv.Itoa(keyring) + ",add_key,unshare-user,clone-newuser,clone3,mount,bpf,perf," +
		"userfaultfd,init_module,kexec,reboot,setns,tiocsti,x32,i386,io_uring,proc-keys"
}

// serverKey puts a secret in the user keyring of this process's user, the
// server's, for the time of the test, and returns the keyring and the
// secret.
func serverKey(t *testing.T) (int, string) {
	t.Helper()
	secret := "sparkles-test-payload-" + strconv.Itoa(os.Getpid())
	id, err := unix.AddKey("user", "sparkles-test-secret", []byte(secret), unix.KEY_SPEC_USER_KEYRING)
	if err != nil {
		t.Fatalf("add a key to the user keyring: %v", err)
	}
	t.Cleanup(func() { unix.KeyctlInt(unix.KEYCTL_INVALIDATE, id, 0, 0, 0) })
	ring, err := unix.KeyctlGetKeyringID(unix.KEY_SPEC_USER_KEYRING, false)
	if err != nil {
		t.Fatal(err)
	}
	return ring, secret
}

// checkSyscallProbes: every syscall probe of the report failed, and the
// secret is nowhere in it.
func checkSyscallProbes(t *testing.T, r map[string]probeResult, secret string) {
	t.Helper()
	n := 0
	for name, res := range r {
		if strings.Contains(res.Detail, secret) || strings.Contains(res.Err, secret) {
			t.Errorf("%s read the server user's key: %+v", name, res)
		}
		if !strings.HasPrefix(name, "syscall:") {
			continue
		}
		n++
		switch {
		case !res.OK:
		case name == "syscall:proc-keys":
			// Hiding /proc/keys is the mounts' job; the filter denies the rest.
			t.Logf("%s: /proc/keys or /proc/key-users is visible (%s)", name, res.Detail)
		default:
			t.Errorf("%s succeeded (%s), want it denied", name, res.Detail)
		}
	}
	if want := strings.Count(syscallProbes(0), ",") + 1; n != want {
		t.Errorf("the report has %d syscall probes, want %d: %v", n, want, r)
	}
}

// TestSeccompConfined: the hostile agent, confined, can call none of what
// the filter denies: not the server user's keyring, not a new user
// namespace by unshare, clone or clone3, nor mount, bpf, perf, userfaultfd,
// modules, kexec, reboot, setns, TIOCSTI, io_uring or another ABI.
func TestSeccompConfined(t *testing.T) {
	ring, secret := serverKey(t)
	r := hostileRun(t, confine.Options{}, map[string]string{"HOSTILE_SYSCALL": syscallProbes(ring)})
	checkSyscallProbes(t, r, secret)
	for _, c := range []string{"control:work", "control:sh"} {
		if !r[c].OK {
			t.Errorf("%s failed: %s", c, r[c].Err)
		}
	}
}

// TestSeccompControls: what agents do still works under the filter: a
// shell's background child, and Node (threads by clone3 falling back to
// clone, libuv's io_uring falling back to its thread pool, a child).
func TestSeccompControls(t *testing.T) {
	l := newLauncher(t, confine.Options{})
	t.Run("sh", func(t *testing.T) {
		out, err := runConfined(t, l, sandboxDir(t, varTmp(t), "sh"), []string{"PATH=/usr/bin:/bin"},
			"/bin/sh", "-c", "sleep 0 & wait $! && echo background-ok")
		if err != nil || !strings.Contains(out, "background-ok") {
			t.Fatalf("%v: %q", err, out)
		}
	})
	t.Run("node", func(t *testing.T) {
		node, err := exec.LookPath("node")
		if err != nil {
			if os.Getenv("CI") != "" {
				t.Fatal("no node on PATH in CI")
			}
			t.Skip("no node on PATH")
		}
		script := `
const { Worker } = require('worker_threads');
const fs = require('fs');
const cp = require('child_process');
const w = new Worker('require("worker_threads").parentPort.postMessage(6 * 7)', { eval: true });
w.on('error', e => { console.error(e); process.exit(1); });
w.on('message', async m => {
  await fs.promises.writeFile('n.txt', 'written');
  const s = await fs.promises.readFile('n.txt', 'utf8');
  const c = cp.execFileSync('/bin/sh', ['-c', 'echo child']).toString().trim();
  console.log('node-ok', m, s, c);
});`
		out, err := runConfined(t, l, sandboxDir(t, varTmp(t), "node"), []string{"PATH=/usr/bin:/bin"}, node, "-e", script)
		if err != nil || !strings.Contains(out, "node-ok 42 written child") {
			t.Fatalf("%v: %q", err, out)
		}
	})
}

// seccompVar makes the test binary, rerun by TestSeccompFilter, the child
// that calls the syscalls: "filter" with the filter installed, "none"
// without, so that each denial is seen to be the filter's.
const seccompVar = "SPARKLES_CONFINE_TEST_SECCOMP"

// filterCall is one syscall the filter denies (want is its errno) or
// allows (want is 0: it must answer as it does without the filter).
// Arguments are chosen to fail harmlessly, with another errno than the
// filter's, where the call is allowed, even as root.
type filterCall struct {
	name string
	want syscall.Errno
	call func() syscall.Errno
}

// noPath is a path that does not exist, for calls that would resolve it.
const noPath = "/nonexistent-sparkles-test"

// pinned keeps the memory path and ioctlArg hand to the kernel as numbers.
var (
	pinned   []*byte
	ioctlArg = byte('x')
)

// path is s as a C string argument.
func path(s string) uintptr {
	p, _ := unix.BytePtrFromString(s)
	pinned = append(pinned, p)
	return uintptr(unsafe.Pointer(p))
}

// raw calls syscall nr with arguments a and returns its errno.
func raw(nr uintptr, a ...uintptr) func() syscall.Errno {
	return func() syscall.Errno {
		var args [6]uintptr
		copy(args[:], a)
		r, _, e := unix.Syscall6(nr, args[0], args[1], args[2], args[3], args[4], args[5])
		if e == 0 && (nr == unix.SYS_USERFAULTFD || nr == unix.SYS_IO_URING_SETUP) {
			unix.Close(int(r))
		}
		return e
	}
}

func filterCalls() []filterCall {
	start := func(attr *syscall.SysProcAttr) func() syscall.Errno {
		return func() syscall.Errno {
			cmd := exec.Command("/bin/true")
			cmd.SysProcAttr = attr
			var e syscall.Errno
			if err := cmd.Run(); err != nil && !errors.As(err, &e) {
				return syscall.EIO
			}
			return e
		}
	}
	devNull, _ := os.Open(os.DevNull)
	ioctl := func(cmd uint64) func() syscall.Errno {
		return raw(unix.SYS_IOCTL, devNull.Fd(), uintptr(cmd), uintptr(unsafe.Pointer(&ioctlArg)))
	}
	eperm, enosys := syscall.EPERM, syscall.ENOSYS
	calls := []filterCall{
		{"getpid", 0, raw(unix.SYS_GETPID)},
		{"keyctl", eperm, raw(unix.SYS_KEYCTL, unix.KEYCTL_GET_KEYRING_ID, ^uintptr(3) /* -4, the user keyring */)},
		{"add_key", eperm, raw(unix.SYS_ADD_KEY, path("user"), path("sparkles-filter-test"), path("x"), 1, ^uintptr(1) /* the process keyring */)},
		{"request_key", eperm, raw(unix.SYS_REQUEST_KEY, path("user"), path("sparkles-none"), 0, ^uintptr(1))},
		{"clone", 0, start(nil)},
		{"unshare:CLONE_FILES", 0, start(&syscall.SysProcAttr{Unshareflags: unix.CLONE_FILES})},
		{"clone3", enosys, raw(unix.SYS_CLONE3, 0, 0)},
		{"setns", eperm, raw(unix.SYS_SETNS, ^uintptr(0), 0)},
		{"mount", eperm, raw(unix.SYS_MOUNT, path("none"), path(noPath), path("tmpfs"), 0, 0)},
		{"umount2", eperm, raw(unix.SYS_UMOUNT2, path(noPath), 0)},
		{"pivot_root", eperm, raw(unix.SYS_PIVOT_ROOT, path(noPath), path(noPath))},
		{"mount_setattr", eperm, raw(unix.SYS_MOUNT_SETATTR, ^uintptr(0), path(""), 0, 0, 0)},
		{"move_mount", eperm, raw(unix.SYS_MOVE_MOUNT, ^uintptr(0), path(""), ^uintptr(0), path(""), 0)},
		{"open_tree", eperm, raw(unix.SYS_OPEN_TREE, ^uintptr(0), path(noPath), 0)},
		{"fsopen", eperm, raw(unix.SYS_FSOPEN, path("sparkles-nofs"), 0)},
		{"fsconfig", eperm, raw(unix.SYS_FSCONFIG, ^uintptr(0), 0, 0, 0, 0)},
		{"fsmount", eperm, raw(unix.SYS_FSMOUNT, ^uintptr(0), 0, 0)},
		{"fspick", eperm, raw(unix.SYS_FSPICK, ^uintptr(0), path(noPath), 0)},
		{"bpf", eperm, raw(unix.SYS_BPF, unix.BPF_MAP_CREATE, 0, 0)},
		{"perf_event_open", eperm, raw(unix.SYS_PERF_EVENT_OPEN, 0, 0, ^uintptr(0), ^uintptr(0), 0)},
		{"userfaultfd", eperm, raw(unix.SYS_USERFAULTFD, unix.O_CLOEXEC|1 /* UFFD_USER_MODE_ONLY */)},
		{"init_module", eperm, raw(unix.SYS_INIT_MODULE, 0, 0, path(""))},
		{"finit_module", eperm, raw(unix.SYS_FINIT_MODULE, ^uintptr(0), path(""), 0)},
		{"delete_module", eperm, raw(unix.SYS_DELETE_MODULE, path("sparkles_none"), 0)},
		{"kexec_load", eperm, raw(unix.SYS_KEXEC_LOAD, 0, 1000, 0, 0xffff0000)},
		{"kexec_file_load", eperm, raw(unix.SYS_KEXEC_FILE_LOAD, ^uintptr(0), ^uintptr(0), 0, 0, 0xffffffff)},
		{"reboot", eperm, raw(unix.SYS_REBOOT, 0 /* not the magic */, 0, 0)},
		{"swapon", eperm, raw(unix.SYS_SWAPON, path(noPath), 0)},
		{"swapoff", eperm, raw(unix.SYS_SWAPOFF, path(noPath))},
		{"acct", eperm, raw(unix.SYS_ACCT, path(noPath))},
		{"quotactl", eperm, raw(unix.SYS_QUOTACTL, 0x80000400 /* Q_GETFMT */, path(noPath), 0, 0)},
		{"quotactl_fd", eperm, raw(unix.SYS_QUOTACTL_FD, ^uintptr(0), 0x80000400, 0, 0)},
		{"syslog", eperm, raw(unix.SYS_SYSLOG, 10 /* SYSLOG_ACTION_SIZE_BUFFER */, 0, 0)},
		{"open_by_handle_at", eperm, raw(unix.SYS_OPEN_BY_HANDLE_AT, ^uintptr(0), 0, 0)},
		{"name_to_handle_at", eperm, raw(unix.SYS_NAME_TO_HANDLE_AT, ^uintptr(99) /* AT_FDCWD */, path("/"), 0, 0, 0)},
		{"lookup_dcookie", eperm, raw(unix.SYS_LOOKUP_DCOOKIE, 0, 0, 0)},
		{"nfsservctl", eperm, raw(unix.SYS_NFSSERVCTL, 0, 0, 0)},
		{"vhangup", eperm, raw(unix.SYS_VHANGUP)}, // no controlling terminal: started with Setsid
		{"personality:query", 0, raw(unix.SYS_PERSONALITY, 0xffffffff)},
		{"personality:linux", 0, raw(unix.SYS_PERSONALITY, 0)},
		{"personality:ADDR_NO_RANDOMIZE", eperm, raw(unix.SYS_PERSONALITY, 0x0040000 /* ADDR_NO_RANDOMIZE */)},
		{"personality:1<<32", eperm, raw(unix.SYS_PERSONALITY, 1<<32)}, // the kernel reads 0
		{"personality:restore", 0, raw(unix.SYS_PERSONALITY, 0)},
		{"io_uring_setup", enosys, raw(unix.SYS_IO_URING_SETUP, 1, 0)},
		{"io_uring_enter", enosys, raw(unix.SYS_IO_URING_ENTER, ^uintptr(0), 0, 0, 0, 0, 0)},
		{"io_uring_register", enosys, raw(unix.SYS_IO_URING_REGISTER, ^uintptr(0), 0, 0, 0)},
		{"ioctl:TCGETS", 0, ioctl(unix.TCGETS)},
		{"ioctl:TIOCSTI", eperm, ioctl(unix.TIOCSTI)},
		{"ioctl:TIOCSTI|1<<32", eperm, ioctl(unix.TIOCSTI | 1<<32)}, // the kernel reads TIOCSTI
		{"ioctl:TIOCLINUX", eperm, ioctl(unix.TIOCLINUX)},
		{"ptrace", 0, raw(unix.SYS_PTRACE, unix.PTRACE_PEEKDATA, 0, 0, 0)},
	}
	for _, ns := range []struct {
		name string
		flag uintptr
	}{{"NEWUSER", unix.CLONE_NEWUSER}, {"NEWNS", unix.CLONE_NEWNS}, {"NEWPID", unix.CLONE_NEWPID}, {"NEWNET", unix.CLONE_NEWNET},
		{"NEWUTS", unix.CLONE_NEWUTS}, {"NEWIPC", unix.CLONE_NEWIPC}, {"NEWCGROUP", unix.CLONE_NEWCGROUP}} {
		calls = append(calls,
			filterCall{"clone:CLONE_" + ns.name, eperm, start(&syscall.SysProcAttr{Cloneflags: ns.flag})},
			filterCall{"unshare:CLONE_" + ns.name, eperm, start(&syscall.SysProcAttr{Unshareflags: ns.flag})})
	}
	calls = append(calls, filterCall{"unshare:CLONE_NEWTIME", eperm, start(&syscall.SysProcAttr{Unshareflags: unix.CLONE_NEWTIME})})
	return append(calls, archFilterCalls()...)
}

// TestSeccompFilter: the filter alone, in a child of this test binary
// (as root in CI, so with every capability): each call it denies answers
// its errno, and answers otherwise without it; each it allows answers as
// without it. A few answer the same either way where capabilities are
// missing or the kernel lacks the call; those are logged, and the test
// fails if one of those every kernel and user has is among them.
func TestSeccompFilter(t *testing.T) {
	if mode := os.Getenv(seccompVar); mode != "" {
		if mode == "filter" {
			if err := confine.InstallSeccomp(); err != nil {
				t.Fatal(err)
			}
		}
		got := map[string]syscall.Errno{}
		for _, c := range filterCalls() {
			got[c.name] = c.call()
		}
		b, _ := json.Marshal(got)
		t.Logf("results %s", b)
		return
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	run := func(mode string) map[string]syscall.Errno {
		cmd := exec.Command(exe, "-test.run=^TestSeccompFilter$", "-test.count=1", "-test.v")
		cmd.Env = append(os.Environ(), seccompVar+"="+mode)
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true} // vhangup hangs up no terminal
		out, err := cmd.CombinedOutput()
		_, line, ok := bytes.Cut(out, []byte("results "))
		line, _, _ = bytes.Cut(line, []byte("\n"))
		var got map[string]syscall.Errno
		if err != nil || !ok || json.Unmarshal(line, &got) != nil {
			t.Fatalf("%s: %v\n%s", mode, err, out)
		}
		return got
	}
	filtered, bare := run("filter"), run("none")
	always := map[string]bool{"keyctl": true, "add_key": true, "clone:CLONE_NEWUSER": true, "clone3": true,
		"io_uring_setup": true, "ioctl:TIOCSTI": true, "ioctl:TIOCSTI|1<<32": true, "personality:1<<32": true}
	for _, c := range filterCalls() {
		got, without := filtered[c.name], bare[c.name]
		switch {
		case c.want == 0 && got != without:
			t.Errorf("%s: %v with the filter, %v without: the filter must allow it", c.name, got, without)
		case c.want != 0 && got != c.want:
			t.Errorf("%s: %v with the filter, want %v", c.name, got, c.want)
		case c.want != 0 && without == c.want && always[c.name]:
			t.Errorf("%s: %v without the filter too: the test proves nothing", c.name, without)
		case c.want != 0 && without == c.want:
			t.Logf("%s: %v without the filter too, here", c.name, without)
		}
	}
}

// seccompData is struct seccomp_data as the kernel gives it to the
// filter, in the words x/net/bpf's VM loads (big-endian 32-bit words):
// nr, arch, instruction pointer, then each argument low word first, as
// on amd64 and arm64.
func seccompData(a arch.AuditArch, nr uint32, args ...uint64) []byte {
	b := make([]byte, 64)
	binary.BigEndian.PutUint32(b[0:], nr)
	binary.BigEndian.PutUint32(b[4:], uint32(a))
	for i, v := range args {
		binary.BigEndian.PutUint32(b[16+8*i:], uint32(v))
		binary.BigEndian.PutUint32(b[20+8*i:], uint32(v>>32))
	}
	return b
}

// TestSeccompProgram runs the filter's program for amd64 and for arm64 in
// a BPF interpreter, with go-seccomp-bpf's tables of syscall numbers: what
// it denies, and what this machine cannot call: the foreign ABI (i386 on
// amd64, 32-bit ARM on arm64) and x32, and argument bits above the 32 the
// kernel reads.
func TestSeccompProgram(t *testing.T) {
	allow, eperm, enosys := int(seccomp.ActionAllow), int(seccomp.ActionErrno)|int(unix.EPERM), int(seccomp.ActionErrno)|int(unix.ENOSYS)
	for _, goarch := range []string{"amd64", "arm64"} {
		prog, err := confine.SeccompProgramFor(goarch)
		if err != nil {
			t.Fatal(err)
		}
		vm, err := bpf.NewVM(prog)
		if err != nil {
			t.Fatal(err)
		}
		native := map[string]*arch.Info{"amd64": arch.X86_64, "arm64": arch.AARCH64}[goarch]
		foreign := map[string]*arch.Info{"amd64": arch.I386, "arm64": arch.ARM}[goarch]
		nr := func(a *arch.Info, name string) uint32 {
			n, ok := a.SyscallNames[name]
			if !ok {
				t.Fatalf("%s has no %s", a.Name, name)
			}
			return uint32(n)
		}
		type vmCase struct {
			name string
			data []byte
			want int
		}
		cases := []vmCase{
			{"getpid", seccompData(native.ID, nr(native, "getpid")), allow},
			{"foreign getpid", seccompData(foreign.ID, nr(foreign, "getpid")), enosys},
			{"foreign keyctl", seccompData(foreign.ID, nr(foreign, "keyctl")), enosys},
			{"unknown arch", seccompData(0x1234, nr(native, "getpid")), enosys},
			{"clone", seccompData(native.ID, nr(native, "clone"), uint64(unix.SIGCHLD)), allow},
			{"clone CLONE_NEWUSER", seccompData(native.ID, nr(native, "clone"), unix.CLONE_NEWUSER|uint64(unix.SIGCHLD)), eperm},
			{"clone CLONE_NEWNET|1<<32", seccompData(native.ID, nr(native, "clone"), unix.CLONE_NEWNET|1<<32), eperm},
			{"unshare CLONE_NEWTIME", seccompData(native.ID, nr(native, "unshare"), unix.CLONE_NEWTIME), eperm},
			{"unshare CLONE_FS", seccompData(native.ID, nr(native, "unshare"), unix.CLONE_FS), allow},
			{"ioctl TCGETS", seccompData(native.ID, nr(native, "ioctl"), 0, unix.TCGETS), allow},
			// The ioctl check leaves the command in the accumulator: a
			// command equal to a denied call's number is still an ioctl.
			{"ioctl with keyctl's number", seccompData(native.ID, nr(native, "ioctl"), 0, uint64(nr(native, "keyctl"))), allow},
			{"ioctl TIOCSTI", seccompData(native.ID, nr(native, "ioctl"), 0, unix.TIOCSTI), eperm},
			{"ioctl TIOCSTI|1<<32", seccompData(native.ID, nr(native, "ioctl"), 0, unix.TIOCSTI|1<<32), eperm},
			{"ioctl TIOCLINUX|1<<63", seccompData(native.ID, nr(native, "ioctl"), 0, unix.TIOCLINUX|1<<63), eperm},
			{"personality 0", seccompData(native.ID, nr(native, "personality"), 0), allow},
			{"personality 0xffffffff", seccompData(native.ID, nr(native, "personality"), 0xffffffff), allow},
			{"personality PER_LINUX32", seccompData(native.ID, nr(native, "personality"), 0x8), allow},
			{"personality ADDR_NO_RANDOMIZE", seccompData(native.ID, nr(native, "personality"), 0x0040000), eperm},
			{"personality 1<<32", seccompData(native.ID, nr(native, "personality"), 1<<32), eperm},
			{"personality 0xffffffff<<32|0x8", seccompData(native.ID, nr(native, "personality"), 0xffffffff<<32|0x8), eperm},
			{"ptrace", seccompData(native.ID, nr(native, "ptrace")), allow},
			{"read", seccompData(native.ID, nr(native, "read")), allow},
		}
		want := map[string]int{"clone3": enosys, "io_uring_setup": enosys, "io_uring_enter": enosys, "io_uring_register": enosys}
		for _, name := range confine.SeccompCalls(goarch) {
			if name == "clone" || name == "unshare" || name == "personality" {
				continue // by their argument, above
			}
			w, ok := want[name]
			if !ok {
				w = eperm
			}
			cases = append(cases, vmCase{name, seccompData(native.ID, nr(native, name)), w})
		}
		if goarch == "amd64" {
			cases = append(cases,
				vmCase{"x32 keyctl", seccompData(native.ID, nr(arch.X32, "keyctl")|0x40000000), enosys},
				vmCase{"x32 getpid", seccompData(native.ID, nr(arch.X32, "getpid")|0x40000000), enosys})
		}
		for _, c := range cases {
			got, err := vm.Run(c.data)
			if err != nil || got != c.want {
				t.Errorf("%s %s: %#x %v, want %#x", goarch, c.name, got, err, c.want)
			}
		}
	}
}

// TestSyscallNumbers: the filter's numbers are go-seccomp-bpf's, on both
// architectures, and every call of the filter has one.
func TestSyscallNumbers(t *testing.T) {
	tables := [2]*arch.Info{arch.X86_64, arch.AARCH64}
	for name, nums := range confine.SyscallNumbers() {
		for i, info := range tables {
			n, ok := info.SyscallNames[name]
			if !ok {
				n = -1
			}
			if nums[i] != n {
				t.Errorf("%s on %s: %d, want %d", name, info.Name, nums[i], n)
			}
		}
	}
	for i, goarch := range []string{"amd64", "arm64"} {
		for _, name := range confine.SeccompCalls(goarch) {
			if n, ok := confine.SyscallNumbers()[name]; !ok || n[i] < 0 {
				t.Errorf("%s: no number for %s", goarch, name)
			}
		}
	}
	if _, err := confine.SeccompProgramFor("riscv64"); err == nil {
		t.Error("a filter for riscv64, whose numbers the table lacks")
	}
}
