package boltstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"go.etcd.io/bbolt"
)

// ErrInUse is returned by the offline tools when another process holds the
// store file, which in practice is a running server.
var ErrInUse = errors.New("the database is in use by a running sparkles server; stop it first")

// CompactOptions tune CompactFile and ReadStats. Zero values take the defaults.
type CompactOptions struct {
	// Timeout bounds the wait for the file lock (default 100ms): the offline
	// tools refuse at once rather than wait for a server to stop.
	Timeout time.Duration
	// TxMaxSize bounds the bytes copied per transaction of the copy
	// (default 64 MiB), which bounds its memory.
	TxMaxSize int64
	// LockGrace is how long the old file stays locked after the compacted
	// copy has replaced it (default 2s, negative for none). A process that
	// opened the path just before the swap waits for the lock of the old
	// file; holding that lock longer than the store's open timeout makes it
	// fail as "in use" instead of running on a file no longer at the path.
	LockGrace time.Duration
	// Removed, when set, is told of each copy an interrupted compaction
	// had left, which CompactFile removes before it starts.
	Removed func(path string, size int64)
}

func (o *CompactOptions) defaults() {
	if o.Timeout <= 0 {
		o.Timeout = 100 * time.Millisecond
	}
	if o.TxMaxSize <= 0 {
		o.TxMaxSize = 64 << 20
	}
	if o.LockGrace == 0 {
		o.LockGrace = 2 * time.Second
	}
}

// CompactFile rewrites the store file at path without its free pages. bbolt
// never shrinks a file: pages freed by pruning are reused, but the file keeps
// its high-water size. The copy goes to a temporary file in the same
// directory, is checked (bbolt's consistency check, and every bucket, key,
// value and bucket sequence equal to the original's), and only then renamed
// over the original. On any failure the original is left untouched. It
// returns the file sizes before and after.
func CompactFile(ctx context.Context, path string, opts CompactOptions) (before, after int64, err error) {
	opts.defaults()
	info, err := os.Stat(path)
	if err != nil {
		return 0, 0, fmt.Errorf("no database at %s: %w", path, unwrapPathErr(err))
	}
	if err := removeLeftCopies(path, opts.Removed); err != nil {
		return 0, 0, err
	}
	src, err := openOffline(path, opts.Timeout)
	if err != nil {
		return 0, 0, err
	}
	srcOpen := true
	defer func() {
		if srcOpen {
			src.Close()
		}
	}()
	before = info.Size()

	tmp, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".compact-*")
	if err != nil {
		return 0, 0, fmt.Errorf("cannot create the compacted copy next to %s: %w", path, unwrapPathErr(err))
	}
	tmpPath := tmp.Name()
	tmp.Close()
	renamed := false
	defer func() {
		if !renamed {
			os.Remove(tmpPath)
		}
	}()
	if err := os.Chmod(tmpPath, info.Mode().Perm()); err != nil {
		return 0, 0, err
	}

	if err := copyCompacted(ctx, src, tmpPath, opts); err != nil {
		return 0, 0, err
	}
	if err := verifyCopy(ctx, src, tmpPath, opts.Timeout); err != nil {
		return 0, 0, fmt.Errorf("the compacted copy does not match %s, which is left as it was: %w", path, err)
	}
	tinfo, err := os.Stat(tmpPath)
	if err != nil {
		return 0, 0, err
	}
	if err := ctx.Err(); err != nil {
		return 0, 0, err
	}
	if err := os.Rename(tmpPath, path); err != nil {
		return 0, 0, fmt.Errorf("cannot replace %s with its compacted copy: %w", path, unwrapPathErr(err))
	}
	renamed = true
	// The rename is durable once the directory entry is.
	if d, err := os.Open(filepath.Dir(path)); err == nil {
		d.Sync()
		d.Close()
	}
	if opts.LockGrace > 0 {
		select {
		case <-time.After(opts.LockGrace):
		case <-ctx.Done():
		}
	}
	srcOpen = false
	if err := src.Close(); err != nil {
		return before, tinfo.Size(), err
	}
	return before, tinfo.Size(), nil
}

// removeLeftCopies removes the copies interrupted compactions left, if no
// process holds the store file: a compaction under way holds a shared lock
// on it for as long as its copy exists, so with the exclusive lock taken
// here none is in use. When the file is locked (a server, a stats, another
// compaction) they stay for the next run.
func removeLeftCopies(path string, removed func(string, int64)) error {
	f, _, err := openLocked(path, os.O_RDONLY, true, 0)
	if errors.Is(err, bbolt.ErrTimeout) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("cannot open %s: %w", path, unwrapPathErr(err))
	}
	defer f.Close()
	if err := removeCompactCopies(path, removed); err != nil {
		return fmt.Errorf("cannot remove the copy an interrupted compaction left: %w", unwrapPathErr(err))
	}
	return nil
}

// openOffline opens the file read-only, with a shared lock, so a running
// server (which holds it exclusively) makes this fail, and a server cannot
// start while it is held. The file is checked before bbolt maps it, as the
// server's open does.
func openOffline(path string, timeout time.Duration) (*bbolt.DB, error) {
	f, _, err := openLocked(path, os.O_RDONLY, false, timeout)
	if errors.Is(err, bbolt.ErrTimeout) {
		return nil, ErrInUse
	}
	if err != nil {
		return nil, fmt.Errorf("cannot open %s: %w", path, unwrapPathErr(err))
	}
	// The offline tools read every page (a copy, a check, the stats of
	// every log): the whole file is checked first.
	if _, err := verifyOpen(f, path, true); err != nil {
		f.Close()
		return nil, err
	}
	var db *bbolt.DB
	err = guard(path, nil, func() error {
		var err error
		db, err = bbolt.Open(path, 0o600, &bbolt.Options{ReadOnly: true, Timeout: timeout, PreLoadFreelist: true, OpenFile: handTo(f)})
		return err
	})
	if err != nil {
		if db == nil {
			f.Close()
		}
		var damaged *DamagedError
		if errors.As(err, &damaged) {
			return nil, err
		}
		return nil, fmt.Errorf("cannot open %s: %w", path, err)
	}
	return db, nil
}

// CheckFile checks the store file at path without starting a store: the
// structure of every page (as a server's open does), then bbolt's
// consistency check and the store's own layout (see Store.Check). Like
// ReadStats it opens the file read-only and refuses with ErrInUse while a
// server runs. A damaged file is a *DamagedError.
func CheckFile(ctx context.Context, path string, opts CompactOptions) error {
	opts.defaults()
	if _, err := os.Stat(path); err != nil {
		return fmt.Errorf("no database at %s: %w", path, unwrapPathErr(err))
	}
	db, err := openOffline(path, opts.Timeout)
	if err != nil {
		return err
	}
	defer db.Close()
	err = guard(path, nil, (&Store{db: db}).Check)
	var damaged *DamagedError
	if err != nil && !errors.As(err, &damaged) {
		err = &DamagedError{Path: path, Problem: err.Error()}
	}
	return err
}

func copyCompacted(ctx context.Context, src *bbolt.DB, dstPath string, opts CompactOptions) error {
	dst, err := bbolt.Open(dstPath, 0o600, &bbolt.Options{Timeout: opts.Timeout})
	if err != nil {
		return fmt.Errorf("cannot open the compacted copy %s: %w", dstPath, err)
	}
	if err := ctx.Err(); err != nil {
		dst.Close()
		return err
	}
	if err := bbolt.Compact(dst, src, opts.TxMaxSize); err != nil {
		dst.Close()
		return fmt.Errorf("compacting into %s: %w", dstPath, err)
	}
	return dst.Close()
}

// verifyCopy reopens the copy from disk, runs bbolt's consistency check on it
// and compares it with the original, bucket by bucket.
func verifyCopy(ctx context.Context, src *bbolt.DB, dstPath string, timeout time.Duration) error {
	dst, err := bbolt.Open(dstPath, 0o600, &bbolt.Options{ReadOnly: true, Timeout: timeout})
	if err != nil {
		return err
	}
	defer dst.Close()
	return dst.View(func(dtx *bbolt.Tx) error {
		var errs []error
		for err := range dtx.Check() { // drain: the checker blocks on each send
			errs = append(errs, err)
		}
		if err := errors.Join(errs...); err != nil {
			return fmt.Errorf("consistency check: %w", err)
		}
		return src.View(func(stx *bbolt.Tx) error {
			return equalRoots(ctx, stx, dtx)
		})
	})
}

func equalRoots(ctx context.Context, a, b *bbolt.Tx) error {
	ca, cb := a.Cursor(), b.Cursor()
	ka, _ := ca.First()
	kb, _ := cb.First()
	for ka != nil || kb != nil {
		if !bytes.Equal(ka, kb) {
			return fmt.Errorf("top-level bucket %q against %q", ka, kb)
		}
		if err := equalBuckets(ctx, string(ka), a.Bucket(ka), b.Bucket(kb)); err != nil {
			return err
		}
		ka, _ = ca.Next()
		kb, _ = cb.Next()
	}
	return nil
}

// equalBuckets walks two buckets in step, as bbolt's own Compact walks one.
func equalBuckets(ctx context.Context, path string, a, b *bbolt.Bucket) error {
	if a == nil || b == nil {
		return fmt.Errorf("%s: a bucket on one side only", path)
	}
	if sa, sb := a.Sequence(), b.Sequence(); sa != sb {
		// The events bucket's sequence is the next event id: it must survive.
		return fmt.Errorf("%s: sequence %d against %d", path, sa, sb)
	}
	ca, cb := a.Cursor(), b.Cursor()
	ka, va := ca.First()
	kb, vb := cb.First()
	for n := 0; ka != nil || kb != nil; n++ {
		if n%4096 == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		if !bytes.Equal(ka, kb) {
			return fmt.Errorf("%s: key %x against %x", path, ka, kb)
		}
		if (va == nil) != (vb == nil) {
			return fmt.Errorf("%s: key %x is a bucket on one side only", path, ka)
		}
		if va == nil {
			if err := equalBuckets(ctx, path+"/"+string(ka), a.Bucket(ka), b.Bucket(kb)); err != nil {
				return err
			}
		} else if !bytes.Equal(va, vb) {
			return fmt.Errorf("%s: value of key %x differs", path, ka)
		}
		ka, va = ca.Next()
		kb, vb = cb.Next()
	}
	return nil
}

// ReadStats returns the Stats of the store file at path without starting a
// store: it opens the file read-only, so it refuses with ErrInUse while a
// server runs and never writes to the file.
func ReadStats(ctx context.Context, path string, opts CompactOptions) (Stats, error) {
	opts.defaults()
	if _, err := os.Stat(path); err != nil {
		return Stats{}, fmt.Errorf("no database at %s: %w", path, unwrapPathErr(err))
	}
	db, err := openOffline(path, opts.Timeout)
	if err != nil {
		return Stats{}, err
	}
	defer db.Close()
	// Stats reads nothing but the file, so a Store around the bare handle
	// serves, without a committer.
	return (&Store{db: db}).Stats(ctx)
}

func unwrapPathErr(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}
