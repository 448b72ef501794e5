package confine

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/sparkles-dev/sparkles/internal/datadir"
)

// An agent's spec as the server makes it: its command resolved, its
// sandbox's home and tmp made (and given to the agent's uid), its
// environment, what it may read and write, and its limits.

func (l *Launcher) spec(cmd *exec.Cmd, sandbox string) (spec, error) {
	sandbox, err := filepath.Abs(sandbox)
	if err != nil {
		return spec{}, err
	}
	home, tmp := datadir.Sandbox(sandbox).Home(), datadir.Sandbox(sandbox).Tmp()
	for _, d := range []string{sandbox, home, tmp} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return spec{}, err
		}
	}
	path := cmd.Path
	if !filepath.IsAbs(path) {
		path = filepath.Join(cmd.Dir, path)
	}
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		return spec{}, fmt.Errorf("resolve agent command: %w", err)
	}
	dir := cmd.Dir
	if real, err := filepath.EvalSymlinks(dir); err == nil {
		dir = real
	}
	if real, err := filepath.EvalSymlinks(sandbox); err == nil {
		sandbox = real
	}
	home, tmp = datadir.Sandbox(sandbox).Home(), datadir.Sandbox(sandbox).Tmp()
	if l.agentID != 0 {
		for _, d := range []string{dir, home, tmp} {
			if err := ownTree(d, l.agentID); err != nil {
				return spec{}, fmt.Errorf("give the sandbox to the agent's uid: %w", err)
			}
		}
	}
	read := append(installPaths(real, l.protect), l.opts.ReadPaths...)
	// /etc/resolv.conf is often a link into /run (systemd-resolved): what
	// it points to is read for name resolution.
	if rc, err := filepath.EvalSymlinks("/etc/resolv.conf"); err == nil && !inSystem(rc) {
		read = append(read, rc)
	}
	resolver, resolverAt := upstreamResolver("/etc/resolv.conf", systemdUpstream)
	return spec{
		Resolver:   resolver,
		ResolverAt: resolverAt,
		Path:       real,
		Args:       cmd.Args,
		Env:        privateEnv(cmd.Env, l.home, home, tmp),
		Dir:        dir,
		Sandbox:    sandbox,
		// Not the sandbox directory itself: agent.log is there, which the
		// server opens again at every boot.
		Own:      []string{dir, home, tmp},
		Read:     read,
		Write:    l.opts.WritePaths,
		Protect:  l.protect,
		Network:  l.opts.Network,
		NoFile:   defaultNoFile,
		MaxProcs: l.maxProcs(),
		ABI:      l.abi,
		AgentID:  l.agentID,
	}, nil
}

func (l *Launcher) maxProcs() uint64 {
	if !l.nproc {
		return 0 // counted per user across the machine: it would count the server's own
	}
	return uint64(l.opts.MaxProcs)
}

// privateEnv gives the agent its sandbox's home and temporary directory:
// the server's HOME (the one the base environment passed on) becomes the
// sandbox's, and TMPDIR is set unless the sandbox's env set one. A HOME the
// sandbox's env chose is kept, as its env wins over the base (docs/agents.md).
func privateEnv(env []string, serverHome, home, tmp string) []string {
	out := make([]string, 0, len(env)+2)
	hasHome, hasTmp := false, false
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		switch k {
		case "HOME":
			hasHome = true
			if filepath.Clean(v) == serverHome || v == "" {
				kv = "HOME=" + home
			}
		case "TMPDIR":
			hasTmp = true
		}
		out = append(out, kv)
	}
	if !hasHome {
		out = append(out, "HOME="+home)
	}
	if !hasTmp {
		out = append(out, "TMPDIR="+tmp)
	}
	return out
}
