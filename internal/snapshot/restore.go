package snapshot

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"sort"
	"strings"
	"syscall"

	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/utils/merkletrie"
)

// Restore puts the workspace back as it was at snapshot id: files added
// since are removed (and the directories they leave empty), modified and
// deleted ones are written back with their mode, symbolic links as links.
// No `.git` at any depth is read or written. Files the snapshot recorded
// without content (doc.go) are left as they are.
//
// Every write goes through an os.Root of the workspace and replaces a
// path by renaming a new file over it, so a link an agent planted (to
// the data dir, to /etc) is replaced, never written through.
func (s *Store) Restore(ctx context.Context, id ID) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	target, tm, err := s.load(id)
	if err != nil {
		return err
	}
	curHash, cm, err := s.scan(ctx)
	if err != nil {
		return err
	}
	cur, err := object.GetTree(s.st, curHash)
	if err != nil {
		return fmt.Errorf("read workspace tree: %w", err)
	}
	tc, err := object.DiffTreeWithOptions(ctx, cur, target, &object.DiffTreeOptions{})
	if err != nil {
		return fmt.Errorf("diff workspace: %w", err)
	}
	keep := unstoredByPath(tm)
	var dels []string
	var writes []*object.Change
	for _, c := range tc {
		action, err := c.Action()
		if err != nil {
			return err
		}
		switch action {
		case merkletrie.Delete:
			if _, ok := keep[c.From.Name]; !ok {
				dels = append(dels, c.From.Name)
			}
		default:
			writes = append(writes, c)
		}
	}
	for p := range unstoredByPath(cm) {
		if _, ok := keep[p]; ok {
			continue
		}
		if _, inTarget := fileIn(target, p); !inTarget {
			dels = append(dels, p)
		}
	}

	root, err := os.OpenRoot(s.work)
	if err != nil {
		return fmt.Errorf("open workspace: %w", err)
	}
	defer root.Close()
	sort.Strings(dels)
	for _, p := range dels {
		if err := root.RemoveAll(p); err != nil {
			return fmt.Errorf("restore: remove %q: %w", p, err)
		}
		removeEmptyParents(root, p)
	}
	sort.Slice(writes, func(i, j int) bool { return writes[i].To.Name < writes[j].To.Name })
	for _, c := range writes {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := s.write(root, c.To.Name, c.To.TreeEntry, target); err != nil {
			return fmt.Errorf("restore %q: %w", c.To.Name, err)
		}
	}
	return nil
}

// removeEmptyParents removes the directories above p that its removal
// left empty; the first one not empty ends it.
func removeEmptyParents(root *os.Root, p string) {
	for dir := path.Dir(p); dir != "."; dir = path.Dir(dir) {
		if root.Remove(dir) != nil {
			return
		}
	}
}

func (s *Store) write(root *os.Root, p string, e object.TreeEntry, tree *object.Tree) error {
	dir := path.Dir(p)
	if err := s.mkdirs(root, dir); err != nil {
		return err
	}
	blob, err := tree.TreeEntryFile(&e)
	if err != nil {
		return err
	}
	r, err := blob.Reader()
	if err != nil {
		return err
	}
	defer r.Close()
	tmp := path.Join(dir, ".sparkles-restore-"+randomSuffix())
	if e.Mode == filemode.Symlink {
		target, err := io.ReadAll(r)
		if err != nil {
			return err
		}
		if err := root.Symlink(string(target), tmp); err != nil {
			return err
		}
		if o := s.opts.Owner; o != nil {
			if err := root.Lchown(tmp, o.UID, o.GID); err != nil {
				root.Remove(tmp)
				return err
			}
		}
	} else {
		perm := fs.FileMode(0o644)
		if e.Mode == filemode.Executable {
			perm = 0o755
		}
		f, err := root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
		if err != nil {
			return err
		}
		_, err = io.Copy(f, r)
		if err == nil {
			err = f.Chmod(perm) // the umask may have cut the bits
		}
		if o := s.opts.Owner; o != nil && err == nil {
			err = f.Chown(o.UID, o.GID)
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			root.Remove(tmp)
			return err
		}
	}
	err = root.Rename(tmp, p)
	if err != nil && isDirInTheWay(err) {
		// A directory took the file's place since; an empty one goes
		// (its files were removed above), any other stays the user's.
		if root.Remove(p) == nil {
			err = root.Rename(tmp, p)
		}
	}
	if err != nil {
		root.Remove(tmp)
	}
	return err
}

func isDirInTheWay(err error) bool {
	return errors.Is(err, syscall.EISDIR) || errors.Is(err, syscall.EEXIST) || errors.Is(err, syscall.ENOTEMPTY)
}

// mkdirs makes dir and its parents real directories: a file or a link
// standing where the snapshot had a directory is removed first, so no
// write ever lands where a link points.
func (s *Store) mkdirs(root *os.Root, dir string) error {
	if dir == "." {
		return nil
	}
	parts := strings.Split(dir, "/")
	for i := range parts {
		p := strings.Join(parts[:i+1], "/")
		fi, err := root.Lstat(p)
		if err == nil && fi.IsDir() {
			continue
		}
		if err == nil {
			if err := root.Remove(p); err != nil {
				return err
			}
		} else if !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		if err := root.Mkdir(p, 0o755); err != nil {
			return err
		}
		if o := s.opts.Owner; o != nil {
			if err := root.Lchown(p, o.UID, o.GID); err != nil {
				return err
			}
		}
	}
	return nil
}

func randomSuffix() string {
	var b [8]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
