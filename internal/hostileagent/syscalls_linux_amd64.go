package main

import (
	"os/exec"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// The other ABIs of an amd64 kernel, through which a filter that checks
// only the native one is bypassed: x32 (the native arch, with bit
// 0x40000000 in the syscall number) and i386 (int 0x80). Both ask for the
// user keyring with keyctl.
const (
	x32Bit      = 0x40000000
	i386Keyctl  = 288
	specUserKey = 0xfffffffc // KEY_SPEC_USER_KEYRING, -4, as 32 bits
)

func x32(string) result {
	_, _, e := syscall.RawSyscall(x32Bit|unix.SYS_KEYCTL, unix.KEYCTL_GET_KEYRING_ID, specUserKey, 0)
	return errno(e)
}

// i386 runs in a child: where the kernel has no i386 ABI (ia32_emulation
// off), int 0x80 faults and kills the process that tries.
func i386(string) result { return inChild("i386", &exec.Cmd{}) }

func i386Child() result {
	r := int80(i386Keyctl, unix.KEYCTL_GET_KEYRING_ID, specUserKey, 0)
	if r < 0 && r > -4096 {
		return errno(syscall.Errno(-r))
	}
	return result{OK: true, Detail: "keyring " + strconv.Itoa(int(r))}
}

// int80 makes an i386 syscall from this 64-bit process (int80_linux_amd64.s).
// Only numbers pass: pointers would be cut to 32 bits.
func int80(trap, a1, a2, a3 uint32) int32
