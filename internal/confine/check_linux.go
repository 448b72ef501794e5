package confine

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// report is what the probe's check says of the confinement it runs in.
type report struct {
	OK       bool     `json:"ok"`
	Failed   []string `json:"failed,omitempty"`
	Landlock int      `json:"landlock"`
}

// check is the probe's agent: it runs confined like an agent and verifies
// that it is, rather than trusting that every step above succeeded. args
// are a file outside the sandbox it must not read and one inside it must
// be able to write. It prints a report and exits 0 when everything holds.
func check(args []string) int {
	var r report
	fail := func(format string, a ...any) { r.Failed = append(r.Failed, fmt.Sprintf(format, a...)) }
	if len(args) != 2 {
		fail("want a canary and a sandbox file, got %q", args)
	} else {
		if _, err := os.ReadFile(args[0]); err == nil {
			fail("read a file outside the sandbox")
		}
		if err := os.WriteFile(args[1], []byte("ok"), 0o600); err != nil {
			fail("cannot write in the sandbox: %v", unwrap(err))
		}
	}
	// PID 1 is the launcher, and this the only other process to be seen.
	ents, err := os.ReadDir("/proc")
	if err != nil {
		fail("list /proc: %v", unwrap(err))
	}
	sawInit := false
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		switch {
		case err != nil, pid == os.Getpid():
		case pid == 1:
			sawInit = true
		default:
			fail("sees process %d", pid)
		}
	}
	if !sawInit {
		fail("not in a PID namespace of its own")
	}
	st := procStatus()
	if st["NoNewPrivs"] != "1" {
		fail("no_new_privs is not set")
	}
	if st["CapEff"] != "0000000000000000" || st["CapBnd"] != "0000000000000000" {
		fail("holds capabilities (effective %s, bounding %s)", st["CapEff"], st["CapBnd"])
	}
	if st["Seccomp"] != "2" {
		fail("has no seccomp filter (Seccomp: %q)", st["Seccomp"])
	}
	// The filter's first reason to be: keyrings, which no namespace hides.
	if _, err := unix.KeyctlGetKeyringID(unix.KEY_SPEC_USER_KEYRING, false); !errors.Is(err, unix.EPERM) {
		fail("can use the kernel keyrings (keyctl: %v)", err)
	}
	r.Landlock = landlockABI()
	r.OK = len(r.Failed) == 0
	_ = json.NewEncoder(os.Stdout).Encode(r)
	if !r.OK {
		return 1
	}
	return 0
}

func procStatus() map[string]string {
	out := map[string]string{}
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return out
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ":"); ok {
			out[k] = strings.TrimSpace(v)
		}
	}
	return out
}
