package snapshot

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/go-git/go-billy/v5/osfs"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/cache"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/storage/filesystem"

	"github.com/sparkles-dev/sparkles/sandbox"
)

// DefaultMaxFileSize is the largest file a snapshot stores by default.
const DefaultMaxFileSize = 100 << 20

// headRef names the newest snapshot, so that `git log` in the store shows
// the chain and a future pruning can walk it.
const headRef = plumbing.ReferenceName("refs/heads/snapshots")

// ID names a snapshot: the hex hash of its commit in the store.
type ID string

// Owner is the uid and gid that restored files and directories get.
type Owner struct{ UID, GID int }

// Options tune a Store; the zero value is usable.
type Options struct {
	// MaxFileSize bounds the files stored: a larger one is recorded by
	// size and hash only (see doc.go). 0 means DefaultMaxFileSize.
	MaxFileSize int64
	// Owner, when set, is given every file and directory Restore writes:
	// the agent's uid when the server is root (confine.AgentID).
	Owner *Owner
	// Now stamps commits; time.Now when nil.
	Now func() time.Time
}

// Store is one sandbox's snapshot store. Its methods are safe for
// concurrent use; they run one at a time.
type Store struct {
	dir, work string
	opts      Options
	st        *objects

	mu    sync.Mutex
	cache *statCache // loaded by the first scan
}

// Open opens (creating it when missing) the store in dir for the workspace
// work. dir must lie outside work: the agent must never see the store.
func Open(dir, work string, opts Options) (*Store, error) {
	if opts.MaxFileSize <= 0 {
		opts.MaxFileSize = DefaultMaxFileSize
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	adir, err1 := filepath.Abs(dir)
	awork, err2 := filepath.Abs(work)
	if err := errors.Join(err1, err2); err != nil {
		return nil, err
	}
	if rel, err := filepath.Rel(awork, adir); err == nil && filepath.IsLocal(rel) || adir == awork {
		return nil, fmt.Errorf("snapshot store %s lies inside the workspace %s", adir, awork)
	}
	if err := os.MkdirAll(adir, 0o700); err != nil {
		return nil, err
	}
	// A bare repository of our own: no work tree, no index of the user's,
	// no hooks run (go-git never runs any).
	// Large blobs are read from their file when a diff or a restore
	// needs them, not into memory.
	st := &objects{
		Storage: filesystem.NewStorageWithOptions(osfs.New(adir), cache.NewObjectLRU(8*cache.MiByte),
			filesystem.Options{LargeObjectThreshold: 1 << 20}),
		hot: cache.NewObjectLRU(hotCacheSize),
	}
	if _, err := os.Stat(filepath.Join(adir, "HEAD")); errors.Is(err, os.ErrNotExist) {
		if err := st.Init(); err != nil {
			return nil, fmt.Errorf("init snapshot store: %w", err)
		}
		if err := st.SetReference(plumbing.NewSymbolicReference(plumbing.HEAD, headRef)); err != nil {
			return nil, fmt.Errorf("init snapshot store: %w", err)
		}
	}
	return &Store{dir: adir, work: awork, opts: opts, st: st}, nil
}

// Close releases the store's resources.
func (s *Store) Close() error { return s.st.Close() }

// manifest is what a commit records beside its tree, as JSON in the
// commit message: the files it did not store.
type manifest struct {
	Unstored []unstored `json:"unstored,omitempty"`
}

// unstored is a file recorded without its content: larger than the limit
// (Hash set) or unreadable by the server (Hash empty).
type unstored struct {
	Path   string `json:"path"`
	Size   int64  `json:"size"`
	Hash   string `json:"hash,omitempty"`
	Reason string `json:"reason"`
}

// Take records the workspace as it is now and answers the snapshot's ID.
// Only blobs that changed since the last snapshot are written.
func (s *Store) Take(ctx context.Context) (ID, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	tree, m, err := s.scan(ctx)
	if err != nil {
		return "", err
	}
	return s.commit(tree, m)
}

func (s *Store) commit(tree plumbing.Hash, m manifest) (ID, error) {
	msg, err := json.Marshal(m)
	if err != nil {
		return "", err
	}
	sig := object.Signature{Name: "sparkles", Email: "sparkles@localhost", When: s.opts.Now()}
	c := &object.Commit{Author: sig, Committer: sig, Message: string(msg) + "\n", TreeHash: tree}
	if head, err := s.st.Reference(headRef); err == nil {
		c.ParentHashes = []plumbing.Hash{head.Hash()}
	}
	o := s.st.NewEncodedObject()
	if err := c.Encode(o); err != nil {
		return "", err
	}
	h, err := s.st.SetEncodedObject(o)
	if err != nil {
		return "", fmt.Errorf("write snapshot: %w", err)
	}
	if err := s.st.SetReference(plumbing.NewHashReference(headRef, h)); err != nil {
		return "", fmt.Errorf("write snapshot: %w", err)
	}
	return ID(h.String()), nil
}

// load finds a snapshot's tree and manifest.
func (s *Store) load(id ID) (*object.Tree, manifest, error) {
	var m manifest
	if !plumbing.IsHash(string(id)) {
		return nil, m, sandbox.Errorf(sandbox.EInvalidRequest, "snapshot id %q is not a 40-digit hex hash", id)
	}
	c, err := object.GetCommit(s.st, plumbing.NewHash(string(id)))
	if errors.Is(err, plumbing.ErrObjectNotFound) {
		return nil, m, sandbox.Errorf(sandbox.ENotFound, "snapshot %s not found", id)
	}
	if err != nil {
		return nil, m, fmt.Errorf("read snapshot %s: %w", id, err)
	}
	if err := json.Unmarshal([]byte(c.Message), &m); err != nil {
		return nil, m, fmt.Errorf("read snapshot %s manifest: %w", id, err)
	}
	t, err := c.Tree()
	if err != nil {
		return nil, m, fmt.Errorf("read snapshot %s tree: %w", id, err)
	}
	return t, m, nil
}
