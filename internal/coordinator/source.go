package coordinator

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/sparkles-dev/sparkles/internal/agent"
	"github.com/sparkles-dev/sparkles/internal/gitsource"
	"github.com/sparkles-dev/sparkles/internal/registry"
	"github.com/sparkles-dev/sparkles/sandbox"
)

// A workspace's source (docs/workspace.md): a git repository given at create is
// cloned into the workspace at the sandbox's first boot, before its
// agent starts, by git run through the agents' launcher (confined like
// the agent, its network open: internal/gitsource). The clone is tried
// once; its outcome is kept in the sandbox's directory (sourceFile), so a
// later boot (a restart, an idle agent booted again) neither clones again
// nor wipes what the agent changed. A failed clone fails the sandbox with
// sandbox.error source_failed, and every later boot says so again: the
// workspace is not what the user asked for.

// GitTokenSecret is the secret that holds a private repository's token.
const GitTokenSecret = "GIT_TOKEN"

// cloneTimeout bounds a clone; a larger repository needs a depth.
const cloneTimeout = 10 * time.Minute

// sourceFile keeps a clone's outcome: "done", or "failed: <message>".
func (b *box) sourceFile() string { return b.dir().Source() }

// sourceFailure is a clone that failed, now or at an earlier boot.
type sourceFailure struct{ msg string }

func (e *sourceFailure) Error() string { return e.msg }

// checkSource validates the source of a create request.
func (c *Coordinator) checkSource(src *sandbox.Source) error {
	if src == nil {
		return nil
	}
	if src.Git == nil {
		return sandbox.Errorf(sandbox.EInvalidRequest, "source needs git: {\"git\": {\"url\": \"https://…\"}}")
	}
	if !hasAgents(c.cfg) || c.cfg.DataDir == "" {
		return sandbox.Errorf(sandbox.EInvalidRequest, "this server runs no agents and keeps no workspaces: a source has nowhere to go")
	}
	return gitsource.Check(*src.Git)
}

// cloneSource clones the sandbox's repository into its empty workspace,
// when it has one and no earlier boot did. It runs on the boot
// goroutine; progress reaches the sandbox's status through the box.
func (b *box) cloneSource(src *sandbox.Source, reg registry.Agent, cfg config, work string) error {
	if src == nil || src.Git == nil {
		return nil
	}
	switch done, err := os.ReadFile(b.sourceFile()); {
	case err == nil && string(done) == "done":
		return nil
	case err == nil:
		return &sourceFailure{msg: strings.TrimPrefix(string(done), "failed: ")}
	case !errors.Is(err, os.ErrNotExist):
		return fmt.Errorf("read the source's outcome: %w", err)
	}
	// A delete cancels it (stop): git must not go on for minutes,
	// holding the slot and writing into a workspace that is gone.
	ctx, cancel := context.WithTimeout(b.c.ctx, cloneTimeout)
	defer cancel()
	b.c.clones.set(b.id, cancel)
	defer b.c.clones.set(b.id, nil)
	// Whatever an interrupted clone left is not the repository.
	if err := clearDir(work); err != nil {
		return fmt.Errorf("clear the workspace for the clone: %w", err)
	}
	err := gitsource.Clone(ctx, gitsource.Job{
		Source:   *src.Git,
		Dir:      work,
		Token:    cfg.Secrets[GitTokenSecret],
		Env:      agentEnv(reg, cfg),
		Launcher: b.c.cfg.Launcher,
		Sandbox:  string(b.dir()),
		Confinement: agent.Confinement{
			ReadPaths: reg.ReadPaths, WritePaths: reg.WritePaths, HostPorts: reg.HostPorts,
		},
		Progress: func(detail string) {
			_ = b.do(ctx, func() { b.setStatus(sandbox.StatusBooting, detail) })
		},
		Log: b.log(),
	})
	var failed *gitsource.Failure
	switch {
	case errors.As(err, &failed):
		msg := "the repository could not be cloned: " + failed.Message
		if werr := os.WriteFile(b.sourceFile(), []byte("failed: "+msg), 0o600); werr != nil {
			b.log().Warn("source: keep the clone's outcome", "err", werr)
		}
		return &sourceFailure{msg: msg}
	case err != nil:
		return fmt.Errorf("clone: %w", err)
	}
	if err := os.WriteFile(b.sourceFile(), []byte("done"), 0o600); err != nil {
		return err
	}
	// The first snapshot of a repository hashes every file (tens of
	// seconds for a large one); taken here, off the box, the first turn's
	// start finds them all known.
	if s, err := b.c.openSnapshots(b.id); err == nil {
		if _, err := s.Take(ctx); err != nil {
			b.log().Warn("source: snapshot of the clone", "err", err)
		}
		s.Close()
	}
	return nil
}

// clearDir removes what is in dir, not dir itself.
func clearDir(dir string) error {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range ents {
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			return err
		}
	}
	return nil
}

// cloneSet is the sandboxes whose repository is being cloned into their
// workspace on this node: no client reads or writes those files until
// the clone is done. Each is kept with what cancels it.
type cloneSet struct {
	mu  sync.Mutex
	ids map[string]context.CancelFunc
}

// set notes sandbox id's clone under way, or its end (a nil cancel).
func (s *cloneSet) set(id string, cancel context.CancelFunc) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ids == nil {
		s.ids = map[string]context.CancelFunc{}
	}
	if cancel != nil {
		s.ids[id] = cancel
	} else {
		delete(s.ids, id)
	}
}

// stop cancels sandbox id's clone, if one is under way.
func (s *cloneSet) stop(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if cancel := s.ids[id]; cancel != nil {
		cancel()
	}
}

// cloning reports whether sandbox id's repository is being cloned here.
func (c *Coordinator) cloning(id string) bool {
	c.clones.mu.Lock()
	defer c.clones.mu.Unlock()
	return c.clones.ids[id] != nil
}
