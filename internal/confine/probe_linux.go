package confine

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/sparkles-dev/sparkles/internal/datadir"
)

// The probe: the launcher started once, on a scratch sandbox, with the
// check as its agent; and what the kernel's refusals of it mean.

// probe starts the launcher once, on a scratch sandbox in the data dir,
// with the check as its agent.
func (l *Launcher) probe() error {
	base := l.opts.DataDir
	if base == "" {
		base = os.TempDir()
	}
	if l.opts.DataDir != "" {
		removeProbeLeftovers(base)
	}
	scratch, err := os.MkdirTemp(base, probePrefix)
	if err != nil {
		return fmt.Errorf("probe: %w", err)
	}
	defer os.RemoveAll(scratch)
	// Held while the probe runs: a later start leaves this directory be
	// (see removeProbeLeftovers).
	if lock, err := os.Open(scratch); err == nil {
		defer lock.Close()
		_ = syscall.Flock(int(lock.Fd()), syscall.LOCK_EX)
	}
	canary := filepath.Join(scratch, "canary")
	if err := os.WriteFile(canary, []byte("not for agents"), 0o600); err != nil {
		return fmt.Errorf("probe: %w", err)
	}
	sandbox := filepath.Join(scratch, "sandbox")
	work := datadir.Sandbox(sandbox).Work()
	if err := os.MkdirAll(work, 0o700); err != nil {
		return fmt.Errorf("probe: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, l.self, checkArg, canary, filepath.Join(work, "probe"))
	cmd.Dir = work
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	sp, err := l.spec(cmd, sandbox)
	if err != nil {
		return fmt.Errorf("probe: %w", err)
	}
	sp.Read = append(sp.Read, l.self)
	// The probe proves the confinement, not the route out: pasta, which
	// takes most of a start's time, never makes an agent's network more
	// than it is (connectNet), so the probe runs without it.
	sp.Network = NetworkNone
	release, err := l.start(cmd, sp)
	if err != nil {
		return namespaceError(err)
	}
	err = cmd.Wait()
	release()
	var r report
	if json.Unmarshal(stdout.Bytes(), &r) == nil && len(r.Failed) > 0 {
		return fmt.Errorf("a confined process could still: %s", strings.Join(r.Failed, "; "))
	}
	if err != nil || !r.OK {
		msg := strings.TrimSpace(stderr.String())
		msg = strings.TrimPrefix(msg, "sparkles launcher: ")
		if msg == "" {
			msg = fmt.Sprint(err)
		}
		return fmt.Errorf("the launcher could not confine a process: %s%s", msg, apparmorHint())
	}
	return nil
}

// probePrefix begins the name of a probe's scratch directory.
const probePrefix = ".confine-probe-"

// removeProbeLeftovers removes from the data dir the scratch directories
// of probes that did not end: a server stopped or killed while its probe
// ran leaves one behind, and every later start would list it with the
// data dir. A running probe holds a lock on its directory, so one whose
// lock is free belongs to no probe that still runs. What cannot be
// removed stays, for the next start to try again.
func removeProbeLeftovers(dataDir string) {
	ents, err := os.ReadDir(dataDir)
	if err != nil {
		return
	}
	for _, e := range ents {
		if !e.IsDir() || !strings.HasPrefix(e.Name(), probePrefix) {
			continue
		}
		dir := filepath.Join(dataDir, e.Name())
		f, err := os.Open(dir)
		if err != nil {
			continue
		}
		if syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) == nil {
			_ = os.RemoveAll(dir)
		}
		f.Close()
	}
}

// namespaceError says why the kernel refused the namespaces.
func namespaceError(err error) error {
	var errno syscall.Errno
	if !errors.As(err, &errno) {
		return err
	}
	var hint string
	switch errno {
	case syscall.EPERM, syscall.EACCES:
		hint = " (unprivileged user namespaces are disabled: kernel.unprivileged_userns_clone, or a security module)"
	case syscall.ENOSPC:
		hint = " (user.max_user_namespaces is 0 or reached)"
	case syscall.EINVAL:
		hint = " (the kernel lacks user, PID or mount namespaces)"
	}
	return fmt.Errorf("the kernel refused new namespaces: %v%s", errno, hint)
}

// apparmorHint names Ubuntu's restriction of user namespaces, which lets
// the clone succeed and the mounts fail.
func apparmorHint() string {
	if b, err := os.ReadFile("/proc/sys/kernel/apparmor_restrict_unprivileged_userns"); err == nil && strings.TrimSpace(string(b)) == "1" {
		return " (AppArmor restricts unprivileged user namespaces: kernel.apparmor_restrict_unprivileged_userns=1; give this binary an AppArmor profile with userns, or set the sysctl to 0)"
	}
	return ""
}
