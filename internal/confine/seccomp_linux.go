package confine

import (
	"fmt"
	"runtime"
	"unsafe"

	seccomp "github.com/elastic/go-seccomp-bpf"
	"github.com/elastic/go-seccomp-bpf/arch"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// The seccomp filter takes the kernel's most exposed interfaces away from
// agents, as Docker's default profile and Flatpak's do: what no coding
// agent needs and what most privilege escalations start from. Everything
// not listed is allowed (an allow-list would break toolchains an agent
// installs). It needs seccomp-BPF (Linux 3.17 with TSYNC, long before the
// Landlock this package requires); without it the launcher fails and the
// server refuses to start, as for any other mechanism.
//
// ptrace stays allowed: debuggers, strace and profilers in the sandbox use
// it, and it reaches nothing else. The PID namespace shows the agent no
// process outside its sandbox, Landlock refuses tracing any process
// outside the agent's domain, and the launcher, the one process inside
// that is not the agent's, keeps capabilities the agent lacks (the kernel
// refuses to trace a process with more). Since Linux 4.8 the filter runs
// again after a tracer changes a syscall, so tracing cannot bypass it.

// nsFlags are the CLONE_NEW* flags clone takes. For clone, CLONE_NEWTIME
// (0x80) overlaps the exit signal and is not a namespace flag; unshare has
// it. Without a user namespace the others need capabilities the agent has
// not; with one they give the agent CAP_SYS_ADMIN over fresh namespaces,
// the kernel surface (nf_tables, mounts, BPF) escalations use.
const (
	nsFlags      = unix.CLONE_NEWNS | unix.CLONE_NEWCGROUP | unix.CLONE_NEWUTS | unix.CLONE_NEWIPC | unix.CLONE_NEWUSER | unix.CLONE_NEWPID | unix.CLONE_NEWNET
	unshareFlags = nsFlags | unix.CLONE_NEWTIME
)

// personalities are what Docker allows: Linux, PER_LINUX32 (i386
// userland under linux32), UNAME26, both, and the query 0xffffffff.
// Anything else (ADDR_NO_RANDOMIZE, READ_IMPLIES_EXEC, other ABIs) weakens
// the agent's own exploit mitigations or reaches rarely used kernel code.
var personalities = []uint64{0x0, 0x8, 0x20000, 0x20008, 0xffffffff}

var (
	eperm  = seccomp.ActionErrno | seccomp.Action(unix.EPERM)
	enosys = seccomp.ActionErrno | seccomp.Action(unix.ENOSYS)
)

// seccompGroups is the filter's list for goarch (amd64 or arm64), one
// group per reason. ioctl is filtered by seccompProgram, whose comparison
// the library cannot express.
func seccompGroups(goarch string) []seccomp.SyscallGroup {
	amd64 := func(names ...string) []string {
		if goarch == "amd64" {
			return names
		}
		return nil
	}
	withBits := func(name string, mask uint64) seccomp.NameWithConditions {
		return seccomp.NameWithConditions{Name: name, Conditions: seccomp.ArgumentConditions{
			{Argument: 0, Operation: seccomp.BitsSet, Value: mask}}}
	}
	var persona seccomp.ArgumentConditions
	for _, p := range personalities {
		persona = append(persona, seccomp.Condition{Argument: 0, Operation: seccomp.NotEqual, Value: p})
	}
	return []seccomp.SyscallGroup{
		// Kernel keyrings are not namespaced: the server user's keyring
		// (its keys, tokens, Kerberos tickets) is one link away.
		{Action: eperm, Names: []string{"keyctl", "add_key", "request_key"}},
		// New namespaces (above all a user namespace: capabilities over
		// it) and joining another process's.
		{Action: eperm, Names: []string{"setns"}, NamesWithCondtions: []seccomp.NameWithConditions{
			withBits("clone", nsFlags), withBits("unshare", unshareFlags)}},
		// clone3 passes its flags in memory, where the filter cannot read
		// them: ENOSYS makes glibc (2.34+) and every other caller fall back
		// to clone, which is filtered above.
		{Action: enosys, Names: []string{"clone3"}},
		// The filesystem view is the launcher's to build, never the
		// agent's to change (the new mount API as the old one).
		{Action: eperm, Names: []string{"mount", "umount2", "pivot_root", "mount_setattr",
			"move_mount", "open_tree", "fsopen", "fsconfig", "fsmount", "fspick"}},
		// BPF programs and performance counters: in-kernel code and a
		// side channel, each with a long record of exploits.
		{Action: eperm, Names: []string{"bpf", "perf_event_open"}},
		// userfaultfd pauses the kernel mid-copy at a time of the caller's
		// choosing, the usual way to win a kernel race.
		{Action: eperm, Names: []string{"userfaultfd"}},
		// The kernel itself: modules, kexec, reboot, swap, accounting,
		// quotas, the kernel log.
		{Action: eperm, Names: []string{"init_module", "finit_module", "delete_module",
			"kexec_load", "kexec_file_load", "reboot", "swapon", "swapoff", "acct",
			"quotactl", "quotactl_fd", "syslog"}},
		// Raw I/O ports and 16-bit segments (x86 only).
		{Action: eperm, Names: amd64("iopl", "ioperm", "modify_ldt")},
		// File handles open any file of a filesystem by number, past the
		// directories that hide it (the "shocker" container escape).
		{Action: eperm, Names: []string{"open_by_handle_at", "name_to_handle_at"}},
		// Obsolete calls nothing needs.
		{Action: eperm, Names: append([]string{"lookup_dcookie", "nfsservctl", "vhangup"},
			amd64("uselib", "create_module", "get_kernel_syms", "query_module", "_sysctl", "sysfs", "ustat")...)},
		// Execution domains other than the default ones.
		{Action: eperm, NamesWithCondtions: []seccomp.NameWithConditions{{Name: "personality", Conditions: persona}}},
		// io_uring runs syscalls the filter never sees, from kernel
		// threads; ENOSYS makes libuv (Node) and others fall back.
		{Action: enosys, Names: []string{"io_uring_setup", "io_uring_enter", "io_uring_register"}},
	}
}

// seccompProgram is the BPF program: a prologue of its own, then the
// library's program for seccompGroups.
//
// The prologue does what the library does not. A syscall of a foreign ABI
// (i386 by int 0x80 on amd64, 32-bit ARM on arm64) carries another arch
// in seccomp_data, and the library lets any foreign arch through with the
// default action, allow: the prologue answers ENOSYS instead. (x32, the
// same arch with bit 0x40000000 in the number, the library answers ENOSYS
// itself.) And it denies the ioctls TIOCSTI (type into the terminal, and so
// into the shell that reads it) and TIOCLINUX (the same on a virtual
// console) by the low 32 bits of the command, which is all the kernel
// reads: the library compares all 64 and would let TIOCSTI|1<<32 pass, as
// Flatpak's filter once did (CVE-2019-10063).
func seccompProgram() ([]bpf.Instruction, error) {
	if runtime.GOARCH != "amd64" && runtime.GOARCH != "arm64" {
		return nil, fmt.Errorf("no filter for linux/%s: agents are confined on linux/amd64 and linux/arm64", runtime.GOARCH)
	}
	native, err := arch.GetInfo(runtime.GOARCH)
	if err != nil {
		return nil, err
	}
	policy := seccomp.Policy{DefaultAction: seccomp.ActionAllow, Syscalls: seccompGroups(runtime.GOARCH)}
	body, err := policy.Assemble()
	if err != nil {
		return nil, err
	}
	// struct seccomp_data: nr at 0, arch at 4, args from 16, each 8 bytes;
	// amd64 and arm64 are little-endian, so an argument's low half is first.
	const offNr, offArch, offArg1 = 0, 4, 16 + 8
	prologue := []bpf.Instruction{
		bpf.LoadAbsolute{Off: offArch, Size: 4},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: uint32(native.ID), SkipFalse: 7}, // → ENOSYS
		bpf.LoadAbsolute{Off: offNr, Size: 4},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: uint32(native.SyscallNames["ioctl"]), SkipFalse: 6}, // → body
		bpf.LoadAbsolute{Off: offArg1, Size: 4},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: unix.TIOCSTI, SkipTrue: 2},   // → EPERM
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: unix.TIOCLINUX, SkipTrue: 1}, // → EPERM
		bpf.Jump{Skip: 2}, // → body
		bpf.RetConstant{Val: uint32(eperm)},
		bpf.RetConstant{Val: uint32(enosys)},
	}
	return append(prologue, body...), nil
}

// installSeccomp loads the filter on every thread of the launcher, and so
// on the agent and everything it starts: filters are inherited across
// fork and exec and can never be removed.
func installSeccomp() error {
	prog, err := seccompProgram()
	if err != nil {
		return err
	}
	raw, err := bpf.Assemble(prog)
	if err != nil {
		return err
	}
	filter := make([]unix.SockFilter, len(raw))
	for i, ins := range raw {
		filter[i] = unix.SockFilter{Code: ins.Op, Jt: ins.Jt, Jf: ins.Jf, K: ins.K}
	}
	fprog := unix.SockFprog{Len: uint16(len(filter)), Filter: &filter[0]}
	// Landlock has set it already; a filter without it needs CAP_SYS_ADMIN.
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("no_new_privs: %w", err)
	}
	// TSYNC: the Go runtime's other threads too, not only this one.
	tid, _, errno := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, unix.SECCOMP_FILTER_FLAG_TSYNC, uintptr(unsafe.Pointer(&fprog)))
	runtime.KeepAlive(filter)
	switch {
	case errno == unix.ENOSYS:
		return fmt.Errorf("the kernel has no seccomp filters (it needs CONFIG_SECCOMP_FILTER): %w", errno)
	case errno != 0:
		return errno
	case tid != 0:
		return fmt.Errorf("thread %d could not take the filter", tid)
	}
	return nil
}
