package boltstore

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"

	"go.etcd.io/bbolt"

	"github.com/sparkles-dev/sparkles/sandbox"
)

// lockRetry is how often a locked file is tried again, as bbolt does: a
// flock cannot be waited on with a timeout.
const lockRetry = 50 * time.Millisecond

// openLocked opens the store file and locks it as bbolt would (exclusive
// for the server, shared for the offline tools), so that the file can be
// checked before bbolt maps it and bbolt is then handed the same
// descriptor, whose lock it takes again at no cost. It fails with
// bbolt.ErrTimeout when another process holds the lock past timeout. A
// file that is replaced at the path while the lock is awaited (db compact
// swapping in its copy) is let go and the new one opened, so the store
// never runs on a file no longer at its path. It returns what the opened
// file is, to compare the path with later.
func openLocked(path string, flag int, exclusive bool, timeout time.Duration) (*os.File, fs.FileInfo, error) {
	deadline := time.Now().Add(timeout)
	for {
		f, err := os.OpenFile(path, flag, 0o600)
		if err != nil {
			return nil, nil, err
		}
		for {
			err = tryLock(f, exclusive)
			if !errors.Is(err, errLocked) || time.Now().After(deadline) {
				break
			}
			time.Sleep(lockRetry)
		}
		if errors.Is(err, errLocked) {
			f.Close()
			return nil, nil, bbolt.ErrTimeout
		}
		if err != nil {
			f.Close()
			return nil, nil, err
		}
		open, err := f.Stat()
		if err != nil {
			f.Close()
			return nil, nil, err
		}
		if at, err := os.Stat(path); err == nil && os.SameFile(at, open) {
			return f, open, nil
		}
		f.Close()
		if time.Now().After(deadline) {
			return nil, nil, bbolt.ErrTimeout
		}
	}
}

// procPath is where the open file f can be read from while the store holds
// it, even once no directory names it: its descriptor under /proc, on
// Linux.
func procPath(f *os.File) string {
	if runtime.GOOS != "linux" {
		return ""
	}
	return fmt.Sprintf("/proc/%d/fd/%d", os.Getpid(), f.Fd())
}

// handTo returns a bbolt OpenFile that gives bbolt f instead of opening the
// path again.
func handTo(f *os.File) func(string, int, os.FileMode) (*os.File, error) {
	return func(string, int, os.FileMode) (*os.File, error) { return f, nil }
}

// verifyOpen checks the locked file f before bbolt maps it (see
// verifyFile), whole or not, and reports whether the check was whole. An
// empty file is a new store, which bbolt initializes.
func verifyOpen(f *os.File, path string, whole bool) (bool, error) {
	fi, err := f.Stat()
	if err != nil {
		return false, err
	}
	if fi.Size() == 0 {
		return false, nil
	}
	return verifyFile(f, fi.Size(), path, whole)
}

// Watching the file (see doc.go, The file under the store). The interval
// bounds how long writes go into a file that is no longer at the path; a
// stat every two seconds costs nothing.
const defaultWatchInterval = 2 * time.Second

// errFileGone is the error of every write once the file is gone from its path.
// Its message reaches API clients, which must not learn host paths; the
// log line that comes with it has the detail.
var errFileGone = &sandbox.Error{Type: sandbox.EUnavailable,
	Message: "the event store cannot take writes: its database file was deleted or replaced under the running server (the server log says what to do); reads keep working"}

// Writable reports whether the store takes writes: nil, or the typed
// unavailable error every write gets once the database file is no longer
// at its path, or once it was found damaged.
func (s *Store) Writable() error {
	switch {
	case s.moved.Load():
		return errFileGone
	case s.damaged.Load():
		return errFileDamaged
	}
	return nil
}

// watchLoop checks the file at every tick until the store closes.
func (s *Store) watchLoop(every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-s.stopWatch:
			return
		case <-t.C:
			s.checkFile()
		}
	}
}

// checkFile compares the file at the path with the one the store has open
// and moves the store in or out of refusing writes. Each change is logged
// once: the ERROR when the file goes, an INFO if the same file comes back
// (a directory moved away and back). It returns Writable's answer.
func (s *Store) checkFile() error {
	if s.path == "" {
		return nil // a file read offline: nothing writes to it
	}
	s.watchMu.Lock()
	defer s.watchMu.Unlock()
	problem := ""
	fi, err := os.Stat(s.path)
	switch {
	case errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR):
		problem = "was deleted (or its directory was)"
	case err != nil:
		problem = fmt.Sprintf("can no longer be found (%v)", unwrapPathErr(err))
	case !os.SameFile(fi, s.opened):
		// While the store holds its file open its inode cannot be
		// reused, so another one at the path is another file.
		problem = "was replaced by another file"
	}
	switch was := s.moved.Load(); {
	case problem != "" && !was:
		// Said before it takes effect: whoever sees writes refused can
		// find the line that says why.
		defer s.moved.Store(true)
		s.log.Error("event store: the database file "+problem+" while the server runs. Writes are refused (503 unavailable) "+
			"and /readyz fails until the same file is back at the path; reads serve what is open. The open file still holds every "+
			"committed write: copy it to a safe place before stopping the server, or they are lost with it",
			"path", s.path, "open_file", s.openFile)
	case problem == "" && was:
		defer s.moved.Store(false)
		s.log.Info("event store: the database file is back at its path; writes are accepted again", "path", s.path)
	}
	if problem != "" {
		return errFileGone
	}
	return nil
}

// failedCommit is the error of a commit that failed with err: the typed
// unavailable error when the file has gone from its path (a failed write
// is the first thing to ask about it), else err.
func (s *Store) failedCommit(err error) error {
	if moved := s.checkFile(); moved != nil {
		return moved
	}
	return fmt.Errorf("commit to event store: %w", err)
}

// refused is the error of a write that arrives while the file is gone; a
// flush, which only moves what the file already holds, still runs.
func (s *Store) refused(w write) error {
	if _, ok := w.(*flushWrite); ok {
		return nil
	}
	return s.Writable()
}

// compactPrefix starts the name of the copy db compact writes next to the
// store file.
const compactPrefix = ".compact-"

// removeCompactCopies removes the copies that interrupted compactions left
// next to the store file at path: files named after it with the suffix
// os.CreateTemp gives (".compact-" and digits). The caller holds the
// exclusive lock of the store file, and a compaction holds a shared lock on
// it for as long as its copy exists, so none of these is in use. It calls
// removed for each one.
func removeCompactCopies(path string, removed func(path string, size int64)) error {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range entries {
		rest, ok := strings.CutPrefix(e.Name(), base+compactPrefix)
		if !ok || rest == "" || strings.Trim(rest, "0123456789") != "" || !e.Type().IsRegular() {
			continue
		}
		p := filepath.Join(dir, e.Name())
		var size int64
		if info, err := e.Info(); err == nil {
			size = info.Size()
		}
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
			continue
		}
		if removed != nil {
			removed(p, size)
		}
	}
	return errors.Join(errs...)
}
