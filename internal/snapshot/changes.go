package snapshot

import (
	"context"
	"fmt"
	"io"
	"sort"

	"github.com/go-git/go-git/v5/plumbing/format/diff"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/utils/merkletrie"

	"github.com/sparkles-dev/sparkles/sandbox"
)

// MaxListed is how many files Changes lists; the counts cover them all.
const MaxListed = sandbox.MaxChangedFiles

// The kinds of FileChange.Change.
const (
	Added    = sandbox.ChangeAdded
	Modified = sandbox.ChangeModified
	Deleted  = sandbox.ChangeDeleted
)

// Changes sums up what changed between two snapshots: the `changes` of
// turn.completed.
type Changes = sandbox.Changes

// FileChange is one file's change.
type FileChange = sandbox.FileChange

// Changes answers what changed from snapshot from to snapshot to: files
// sorted by path, at most MaxListed of them. A mode change (the
// executable bit) or a file turned into a symbolic link is a
// modification. Files recorded without content (doc.go) count by size and
// hash.
func (s *Store) Changes(ctx context.Context, from, to ID) (Changes, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	all, _, err := s.treeChanges(ctx, from, to)
	if err != nil {
		return Changes{}, err
	}
	out := Changes{Files: []FileChange{}}
	for _, fc := range all {
		switch fc.Change {
		case Added:
			out.Added++
		case Modified:
			out.Modified++
		case Deleted:
			out.Deleted++
		}
	}
	if len(all) > MaxListed {
		all, out.Truncated = all[:MaxListed], true
	}
	out.Files = append(out.Files, all...)
	return out, nil
}

// treeChanges lists every change, sorted by path, and the tree changes
// a patch is made of.
func (s *Store) treeChanges(ctx context.Context, from, to ID) ([]FileChange, object.Changes, error) {
	a, am, err := s.load(from)
	if err != nil {
		return nil, nil, err
	}
	b, bm, err := s.load(to)
	if err != nil {
		return nil, nil, err
	}
	tc, err := object.DiffTreeWithOptions(ctx, a, b, &object.DiffTreeOptions{})
	if err != nil {
		return nil, nil, fmt.Errorf("diff snapshots: %w", err)
	}
	byPath := map[string]string{}
	for _, c := range tc {
		action, err := c.Action()
		if err != nil {
			return nil, nil, err
		}
		switch action {
		case merkletrie.Insert:
			byPath[c.To.Name] = Added
		case merkletrie.Delete:
			byPath[c.From.Name] = Deleted
		default:
			byPath[c.To.Name] = Modified
		}
	}
	// A path may move between the tree and the unstored list (a file
	// growing past the limit): fold both into one change per path.
	au, bu := unstoredByPath(am), unstoredByPath(bm)
	for p, x := range au {
		y, inB := bu[p]
		_, inTreeB := fileIn(b, p)
		switch {
		case inB && x.Size == y.Size && x.Hash == y.Hash:
		case inB || inTreeB:
			byPath[p] = Modified
		default:
			byPath[p] = Deleted
		}
	}
	for p := range bu {
		if _, inA := au[p]; inA {
			continue
		}
		if _, inTreeA := fileIn(a, p); inTreeA {
			byPath[p] = Modified
		} else {
			byPath[p] = Added
		}
	}
	files := make([]FileChange, 0, len(byPath))
	for p, c := range byPath {
		files = append(files, FileChange{Path: p, Change: c})
	}
	sort.Slice(files, func(i, j int) bool { return files[i].Path < files[j].Path })
	return files, tc, nil
}

func unstoredByPath(m manifest) map[string]unstored {
	out := make(map[string]unstored, len(m.Unstored))
	for _, u := range m.Unstored {
		if u.Path != "" && u.Path[len(u.Path)-1] != '/' { // directories are notes only
			out[u.Path] = u
		}
	}
	return out
}

func fileIn(t *object.Tree, p string) (*object.TreeEntry, bool) {
	e, err := t.FindEntry(p)
	return e, err == nil && e.Mode.IsFile()
}

// Diff writes the unified diff (git's format) from snapshot from to
// snapshot to. Binary files are named, not diffed; files recorded without
// content are named with their sizes.
func (s *Store) Diff(ctx context.Context, from, to ID, w io.Writer) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, tc, err := s.treeChanges(ctx, from, to)
	if err != nil {
		return err
	}
	patch, err := tc.PatchContext(ctx)
	if err != nil {
		return fmt.Errorf("diff snapshots: %w", err)
	}
	if err := diff.NewUnifiedEncoder(w, diff.DefaultContextLines).Encode(patch); err != nil {
		return err
	}
	_, am, _ := s.load(from)
	_, bm, _ := s.load(to)
	au, bu := unstoredByPath(am), unstoredByPath(bm)
	paths := make([]string, 0, len(au)+len(bu))
	for p := range au {
		paths = append(paths, p)
	}
	for p := range bu {
		if _, ok := au[p]; !ok {
			paths = append(paths, p)
		}
	}
	sort.Strings(paths)
	for _, p := range paths {
		x, inA := au[p]
		y, inB := bu[p]
		if inA && inB && x.Size == y.Size && x.Hash == y.Hash {
			continue
		}
		if _, err := fmt.Fprintf(w, "diff --git a/%s b/%s\nFile %s not stored (%s), not diffed\n", p, p, p, describe(x, inA, y, inB)); err != nil {
			return err
		}
	}
	return nil
}

func describe(x unstored, inA bool, y unstored, inB bool) string {
	switch {
	case inA && inB:
		return fmt.Sprintf("%s: %d bytes, then %s: %d bytes", x.Reason, x.Size, y.Reason, y.Size)
	case inA:
		return fmt.Sprintf("%s: %d bytes before", x.Reason, x.Size)
	default:
		return fmt.Sprintf("%s: %d bytes after", y.Reason, y.Size)
	}
}
