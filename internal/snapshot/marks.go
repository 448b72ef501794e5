package snapshot

import (
	"errors"
	"fmt"
	"strings"

	"github.com/go-git/go-git/v5/plumbing"

	"github.com/sparkles-dev/sparkles/sandbox"
)

// Marks name snapshots for their caller: the coordinator marks a turn's
// start and end ("turn_…/start", "turn_…/end") so that its diff and its
// revert find them later, after a restart too. A mark is a ref under
// refs/marks/ in the store, so it also keeps its snapshot reachable for
// a future pruning.

// markRef is the ref of mark name. Names are the caller's ids: letters,
// digits, '_', '-' and '/' between words.
func markRef(name string) (plumbing.ReferenceName, error) {
	if name == "" || strings.HasPrefix(name, "/") || strings.HasSuffix(name, "/") || strings.Contains(name, "//") {
		return "", fmt.Errorf("snapshot mark %q: bad name", name)
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-' || r == '/') {
			return "", fmt.Errorf("snapshot mark %q: bad name", name)
		}
	}
	return plumbing.ReferenceName("refs/marks/" + name), nil
}

// Mark names snapshot id name, replacing what the name named before.
func (s *Store) Mark(name string, id ID) error {
	ref, err := markRef(name)
	if err != nil {
		return err
	}
	if !plumbing.IsHash(string(id)) {
		return fmt.Errorf("snapshot mark %q: %q is not a snapshot id", name, id)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.st.SetReference(plumbing.NewHashReference(ref, plumbing.NewHash(string(id)))); err != nil {
		return fmt.Errorf("snapshot mark %q: %w", name, err)
	}
	return nil
}

// Marked answers the snapshot name names; a name never marked answers a
// not_found *sandbox.Error.
func (s *Store) Marked(name string) (ID, error) {
	ref, err := markRef(name)
	if err != nil {
		return "", err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	r, err := s.st.Reference(ref)
	if errors.Is(err, plumbing.ErrReferenceNotFound) {
		return "", sandbox.Errorf(sandbox.ENotFound, "no snapshot marked %s", name)
	}
	if err != nil {
		return "", fmt.Errorf("snapshot mark %q: %w", name, err)
	}
	return ID(r.Hash().String()), nil
}
