package confine

import (
	"fmt"
	"runtime"
	"unsafe"

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
var personalities = []uint32{0x0, 0x8, 0x20000, 0x20008, 0xffffffff}

const (
	eperm  = unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM)
	enosys = unix.SECCOMP_RET_ERRNO | uint32(unix.ENOSYS)
	allow  = unix.SECCOMP_RET_ALLOW
)

// A seccompGroup is denied with one action, for one reason.
type seccompGroup struct {
	action uint32
	calls  []seccompCall
}

// A seccompCall is one denied syscall: always, or only when its first
// argument has one of the bits of anyBit, or only when its first argument
// is none of only (all 64 bits compared).
type seccompCall struct {
	name   string
	anyBit uint32
	only   []uint32
}

// seccompGroups is the filter's list for goarch (amd64 or arm64), one
// group per reason. ioctl is filtered by seccompProgram's prologue.
func seccompGroups(goarch string) []seccompGroup {
	calls := func(names ...string) []seccompCall {
		var cs []seccompCall
		for _, n := range names {
			cs = append(cs, seccompCall{name: n})
		}
		return cs
	}
	amd64 := func(names ...string) []seccompCall {
		if goarch == "amd64" {
			return calls(names...)
		}
		return nil
	}
	return []seccompGroup{
		// Kernel keyrings are not namespaced: the server user's keyring
		// (its keys, tokens, Kerberos tickets) is one link away.
		{eperm, calls("keyctl", "add_key", "request_key")},
		// New namespaces (above all a user namespace: capabilities over
		// it) and joining another process's.
		{eperm, append(calls("setns"), seccompCall{name: "clone", anyBit: nsFlags}, seccompCall{name: "unshare", anyBit: unshareFlags})},
		// clone3 passes its flags in memory, where the filter cannot read
		// them: ENOSYS makes glibc (2.34+) and every other caller fall back
		// to clone, which is filtered above.
		{enosys, calls("clone3")},
		// The filesystem view is the launcher's to build, never the
		// agent's to change (the new mount API as the old one).
		{eperm, calls("mount", "umount2", "pivot_root", "mount_setattr",
			"move_mount", "open_tree", "fsopen", "fsconfig", "fsmount", "fspick")},
		// BPF programs and performance counters: in-kernel code and a
		// side channel, each with a long record of exploits.
		{eperm, calls("bpf", "perf_event_open")},
		// userfaultfd pauses the kernel mid-copy at a time of the caller's
		// choosing, the usual way to win a kernel race.
		{eperm, calls("userfaultfd")},
		// The kernel itself: modules, kexec, reboot, swap, accounting,
		// quotas, the kernel log.
		{eperm, calls("init_module", "finit_module", "delete_module",
			"kexec_load", "kexec_file_load", "reboot", "swapon", "swapoff", "acct",
			"quotactl", "quotactl_fd", "syslog")},
		// Raw I/O ports and 16-bit segments (x86 only).
		{eperm, amd64("iopl", "ioperm", "modify_ldt")},
		// File handles open any file of a filesystem by number, past the
		// directories that hide it (the "shocker" container escape).
		{eperm, calls("open_by_handle_at", "name_to_handle_at")},
		// Obsolete calls nothing needs.
		{eperm, append(calls("lookup_dcookie", "nfsservctl", "vhangup"),
			amd64("uselib", "create_module", "get_kernel_syms", "query_module", "_sysctl", "sysfs", "ustat")...)},
		// Execution domains other than the default ones.
		{eperm, []seccompCall{{name: "personality", only: personalities}}},
		// io_uring runs syscalls the filter never sees, from kernel
		// threads; ENOSYS makes libuv (Node) and others fall back.
		{enosys, calls("io_uring_setup", "io_uring_enter", "io_uring_register")},
	}
}

// syscallNumbers is each filtered call's number on amd64 and on arm64
// (-1: not a call there), from the kernel's tables
// (arch/x86/entry/syscalls/syscall_64.tbl, include/uapi/asm-generic/
// unistd.h). The test checks each against go-seccomp-bpf's tables. The
// filter was that library's until it showed in the server's cold start: it
// builds the tables of every architecture it knows when a process starts
// (0.55 ms and 165 KB of heap at each start of this binary, the launcher's
// included, with a warm page cache; about 1 ms with a cold one), for the
// 52 numbers written here.
func syscallNumbers() map[string][2]int {
	return map[string][2]int{
		"keyctl":            {250, 219},
		"add_key":           {248, 217},
		"request_key":       {249, 218},
		"setns":             {308, 268},
		"clone":             {56, 220},
		"unshare":           {272, 97},
		"clone3":            {435, 435},
		"mount":             {165, 40},
		"umount2":           {166, 39},
		"pivot_root":        {155, 41},
		"mount_setattr":     {442, 442},
		"move_mount":        {429, 429},
		"open_tree":         {428, 428},
		"fsopen":            {430, 430},
		"fsconfig":          {431, 431},
		"fsmount":           {432, 432},
		"fspick":            {433, 433},
		"bpf":               {321, 280},
		"perf_event_open":   {298, 241},
		"userfaultfd":       {323, 282},
		"init_module":       {175, 105},
		"finit_module":      {313, 273},
		"delete_module":     {176, 106},
		"kexec_load":        {246, 104},
		"kexec_file_load":   {320, 294},
		"reboot":            {169, 142},
		"swapon":            {167, 224},
		"swapoff":           {168, 225},
		"acct":              {163, 89},
		"quotactl":          {179, 60},
		"quotactl_fd":       {443, 443},
		"syslog":            {103, 116},
		"iopl":              {172, -1},
		"ioperm":            {173, -1},
		"modify_ldt":        {154, -1},
		"open_by_handle_at": {304, 265},
		"name_to_handle_at": {303, 264},
		"lookup_dcookie":    {212, 18},
		"nfsservctl":        {180, 42},
		"vhangup":           {153, 58},
		"uselib":            {134, -1},
		"create_module":     {174, -1},
		"get_kernel_syms":   {177, -1},
		"query_module":      {178, -1},
		"_sysctl":           {156, -1},
		"sysfs":             {139, -1},
		"ustat":             {136, -1},
		"personality":       {135, 92},
		"io_uring_setup":    {425, 425},
		"io_uring_enter":    {426, 426},
		"io_uring_register": {427, 427},
		"ioctl":             {16, 29},
	}
}

// seccompProgram is the BPF program for this machine's architecture.
func seccompProgram() ([]bpf.Instruction, error) { return seccompProgramFor(runtime.GOARCH) }

// seccompProgramFor is the BPF program for goarch: a prologue, one
// block per denied call, and allow.
//
// The prologue answers ENOSYS to any syscall of a foreign ABI (i386 by int
// 0x80 on amd64, 32-bit ARM on arm64), whose numbers mean other calls, and
// on amd64 to x32's (the same arch with bit 0x40000000 in the number). And
// it denies the ioctls TIOCSTI (type into the terminal, and so into the
// shell that reads it) and TIOCLINUX (the same on a virtual console) by the
// low 32 bits of the command, which is all the kernel reads: comparing all
// 64 would let TIOCSTI|1<<32 pass, as Flatpak's filter once did
// (CVE-2019-10063).
func seccompProgramFor(goarch string) ([]bpf.Instruction, error) {
	// native is seccomp_data's arch (AUDIT_ARCH_*); col, the column of
	// syscallNumbers; x32, whether the x32 ABI shares the arch.
	var native uint32
	var col int
	var x32 uint8
	switch goarch {
	case "amd64":
		native, col, x32 = unix.AUDIT_ARCH_X86_64, 0, 1
	case "arm64":
		native, col = unix.AUDIT_ARCH_AARCH64, 1
	default:
		return nil, fmt.Errorf("no filter for linux/%s: agents are confined on linux/amd64 and linux/arm64", goarch)
	}
	numbers := syscallNumbers()
	number := func(name string) (uint32, error) {
		n, ok := numbers[name]
		if !ok || n[col] < 0 {
			return 0, fmt.Errorf("seccomp filter: linux/%s has no syscall %s", goarch, name)
		}
		return uint32(n[col]), nil
	}
	ioctl, err := number("ioctl")
	if err != nil {
		return nil, err
	}
	// struct seccomp_data: nr at 0, arch at 4, args from 16, each 8 bytes;
	// amd64 and arm64 are little-endian, so an argument's low half is first.
	const offNr, offArch, offArg0, offArg1 = 0, 4, 16, 24
	prog := []bpf.Instruction{
		bpf.LoadAbsolute{Off: offArch, Size: 4},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: native, SkipFalse: 7 + x32}, // → ENOSYS
		bpf.LoadAbsolute{Off: offNr, Size: 4},
	}
	if x32 == 1 {
		prog = append(prog, bpf.JumpIf{Cond: bpf.JumpBitsSet, Val: 0x40000000, SkipTrue: 6}) // → ENOSYS
	}
	prog = append(prog,
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: ioctl, SkipFalse: 6}, // → the calls
		bpf.LoadAbsolute{Off: offArg1, Size: 4},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: unix.TIOCSTI, SkipTrue: 2},   // → EPERM
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: unix.TIOCLINUX, SkipTrue: 1}, // → EPERM
		bpf.Jump{Skip: 2}, // → the calls
		bpf.RetConstant{Val: eperm},
		bpf.RetConstant{Val: enosys},
	)
	// Each call's block ends in its action; a call that is not the
	// block's, or whose argument does not match, jumps past it. A holds
	// the number until a block loads an argument (as the ioctl check
	// above did: the calls begin by loading it).
	haveNr := false
	for _, g := range seccompGroups(goarch) {
		for _, c := range g.calls {
			nr, err := number(c.name)
			if err != nil {
				return nil, err
			}
			if !haveNr {
				prog = append(prog, bpf.LoadAbsolute{Off: offNr, Size: 4})
			}
			switch {
			case c.anyBit != 0:
				prog = append(prog,
					bpf.JumpIf{Cond: bpf.JumpEqual, Val: nr, SkipFalse: 3},
					bpf.LoadAbsolute{Off: offArg0, Size: 4},
					bpf.JumpIf{Cond: bpf.JumpBitsSet, Val: c.anyBit, SkipFalse: 1})
				haveNr = false
			case c.only != nil:
				k := uint8(len(c.only))
				prog = append(prog,
					bpf.JumpIf{Cond: bpf.JumpEqual, Val: nr, SkipFalse: 4 + k},
					bpf.LoadAbsolute{Off: offArg0 + 4, Size: 4}, // high half: not 0, denied
					bpf.JumpIf{Cond: bpf.JumpEqual, Val: 0, SkipFalse: 1 + k},
					bpf.LoadAbsolute{Off: offArg0, Size: 4})
				for i, v := range c.only {
					prog = append(prog, bpf.JumpIf{Cond: bpf.JumpEqual, Val: v, SkipTrue: k - uint8(i)}) // → past the block
				}
				haveNr = false
			default:
				prog = append(prog, bpf.JumpIf{Cond: bpf.JumpEqual, Val: nr, SkipFalse: 1})
				haveNr = true
			}
			prog = append(prog, bpf.RetConstant{Val: g.action})
		}
	}
	return append(prog, bpf.RetConstant{Val: allow}), nil
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
