package confine

import (
	"fmt"
	"os"

	"github.com/landlock-lsm/go-landlock/landlock"
	ll "github.com/landlock-lsm/go-landlock/landlock/syscall"
)

// presets are go-landlock's configurations by ABI version, index 0 unused.
var presets = []landlock.Config{{}, landlock.V1, landlock.V2, landlock.V3, landlock.V4, landlock.V5,
	landlock.V6, landlock.V7, landlock.V8, landlock.V9, landlock.V10, landlock.V11}

// landlockABI is the kernel's Landlock ABI version, 0 without Landlock.
func landlockABI() int {
	v, err := ll.LandlockGetABIVersion()
	if err != nil || v < 0 {
		return 0
	}
	return v
}

// devices are what shells, node and their children open in /dev.
var devices = []string{"/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty"}

// restrict applies Landlock to the launcher and so to the agent. It
// handles every filesystem right and IPC scope of the ABI the server
// probed, and no network right (the network setting is a namespace).
//
// Not best effort: go-landlock's best-effort mode falls back to no
// restriction at all when a rule asks for a right the kernel lacks, so
// the configuration is built for the exact ABI instead, and the rights a
// lower ABI lacks (refer, ioctl on devices) are asked only where it has them.
func restrict(sp spec) error {
	abi := min(sp.ABI, len(presets)-1)
	if abi < 1 {
		return fmt.Errorf("Landlock ABI %d: Landlock is not available", sp.ABI)
	}
	cfg := landlock.Config{HandledAccessFS: presets[abi].HandledAccessFS, Scoped: presets[abi].Scoped}
	rw := func(paths ...string) landlock.FSRule {
		r := landlock.RWDirs(paths...)
		if abi >= 2 {
			r = r.WithRefer() // rename and link across the sandbox's directories
		}
		return r
	}
	dev := func(r landlock.FSRule) landlock.FSRule {
		if abi >= 5 {
			r = r.WithIoctlDev() // terminal ioctls on the agent's own ptys
		}
		return r
	}
	rules := []landlock.Rule{
		landlock.RODirs(systemDirs...).IgnoreIfMissing(),
		landlock.RODirs("/proc", "/sys").IgnoreIfMissing(),
		dev(landlock.RWFiles(devices...)).IgnoreIfMissing(),
		rw(sp.Own...),
	}
	for _, p := range sp.Read {
		if isDir(p) {
			rules = append(rules, landlock.RODirs(p))
		} else {
			rules = append(rules, landlock.ROFiles(p))
		}
	}
	for _, p := range sp.Write {
		fi, err := os.Stat(p)
		switch {
		case err != nil:
			return fmt.Errorf("write path %s: %w", p, unwrap(err))
		case fi.IsDir():
			rules = append(rules, dev(rw(p)))
		default:
			rules = append(rules, dev(landlock.RWFiles(p)))
		}
	}
	if err := cfg.Restrict(rules...); err != nil {
		return fmt.Errorf("landlock: %w", err)
	}
	return nil
}
