package disk_test

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/sparkles-dev/sparkles/internal/disk"
	"github.com/sparkles-dev/sparkles/internal/nobody"
)

func write(t testing.TB, path string, n int) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, bytes.Repeat([]byte{'x'}, n), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestUsage(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("blocks are counted on Linux; elsewhere Usage is a rough count")
	}
	t.Run("OK", func(t *testing.T) {
		a, b := t.TempDir(), t.TempDir()
		write(t, filepath.Join(a, "one"), 1<<20)
		write(t, filepath.Join(a, "deep", "er", "two"), 2<<20)
		write(t, filepath.Join(b, "three"), 3<<20)
		got, err := disk.Usage(a, b, filepath.Join(a, "missing"))
		if err != nil {
			t.Fatal(err)
		}
		// The files' blocks plus a few directory blocks.
		if want := int64(6 << 20); got < want || got > want+64<<10 {
			t.Errorf("Usage = %d, want %d plus directory blocks", got, want)
		}
	})
	t.Run("SparseAndLinks", func(t *testing.T) {
		dir := t.TempDir()
		f, err := os.Create(filepath.Join(dir, "sparse"))
		if err != nil {
			t.Fatal(err)
		}
		if err := f.Truncate(1 << 40); err != nil { // a TiB that takes nothing
			t.Fatal(err)
		}
		f.Close()
		write(t, filepath.Join(dir, "real"), 1<<20)
		for i := range 8 {
			if err := os.Link(filepath.Join(dir, "real"), filepath.Join(dir, fmt.Sprint("link", i))); err != nil {
				t.Fatal(err)
			}
		}
		got, err := disk.Usage(dir)
		if err != nil {
			t.Fatal(err)
		}
		if want := int64(1 << 20); got < want || got > want+64<<10 {
			t.Errorf("Usage = %d, want the one MiB the file holds, counted once", got)
		}
	})
	t.Run("LinksNotFollowed", func(t *testing.T) {
		outside, dir := t.TempDir(), t.TempDir()
		write(t, filepath.Join(outside, "big"), 4<<20)
		if err := os.Symlink(outside, filepath.Join(dir, "out")); err != nil {
			t.Fatal(err)
		}
		// The tree given may itself be a link: it is not followed either.
		link := filepath.Join(t.TempDir(), "link")
		if err := os.Symlink(outside, link); err != nil {
			t.Fatal(err)
		}
		got, err := disk.Usage(dir)
		if err != nil || got > 64<<10 {
			t.Errorf("Usage through a link = %d, %v; want the link alone", got, err)
		}
		if got, _ := disk.Usage(link); got != 0 {
			t.Errorf("Usage of a link to a tree = %d, want 0", got)
		}
	})
	t.Run("TooDeep", func(t *testing.T) {
		dir := t.TempDir()
		// Made relative to the last level: the path would pass PATH_MAX.
		cur, err := os.OpenRoot(dir)
		if err != nil {
			t.Fatal(err)
		}
		for range 600 {
			if err := cur.Mkdir("d", 0o755); err != nil {
				t.Fatal(err)
			}
			next, err := cur.OpenRoot("d")
			cur.Close()
			if err != nil {
				t.Fatal(err)
			}
			cur = next
		}
		if err := cur.WriteFile("hidden", bytes.Repeat([]byte{'x'}, 1<<20), 0o644); err != nil {
			t.Fatal(err)
		}
		cur.Close()
		_, err = disk.Usage(dir)
		if !errors.Is(err, disk.ErrTooDeep) {
			t.Errorf("Usage of a tree 600 levels deep: %v, want ErrTooDeep", err)
		}
		if err := disk.RemoveAll(dir); err != nil {
			t.Fatal(err)
		}
	})
}

func TestFree(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("free space is measured on Linux")
	}
	free, err := disk.Free(t.TempDir())
	if err != nil || free <= 0 {
		t.Fatalf("Free = %d, %v", free, err)
	}
	if _, err := disk.Free(filepath.Join(t.TempDir(), "missing")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Free of a missing path: %v, want not exist", err)
	}
}

// TestRemoveAllReadOnly: a tree an agent left read-only (directories
// 0555, as `go mod download` leaves them, and 0000) is removed; a
// directory outside it that a link points to keeps its mode. Root
// removes such a tree whatever its modes, so as root the test runs again
// as nobody, where os.RemoveAll alone fails.
func TestRemoveAllReadOnly(t *testing.T) {
	base := t.TempDir()
	outside := filepath.Join(base, "outside")
	write(t, filepath.Join(outside, "keep"), 10)
	if err := os.Chmod(outside, 0o555); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Chmod(outside, 0o755) })
	dir := filepath.Join(base, "sandbox")
	mod := filepath.Join(dir, "work", "pkg", "mod", "example.com", "m@v1.0.0")
	write(t, filepath.Join(mod, "go.mod"), 100)
	write(t, filepath.Join(dir, "work", "locked", "inner", "f"), 100)
	if err := os.Symlink(outside, filepath.Join(mod, "escape")); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{mod, filepath.Dir(mod), filepath.Join(dir, "work", "pkg", "mod"), filepath.Join(dir, "work", "pkg")} {
		if err := os.Chmod(d, 0o555); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range []string{filepath.Join(dir, "work", "locked", "inner"), filepath.Join(dir, "work", "locked")} {
		if err := os.Chmod(d, 0o000); err != nil {
			t.Fatal(err)
		}
	}
	if err := disk.RemoveAll(dir); err != nil {
		t.Fatalf("RemoveAll as uid %d: %v", os.Getuid(), err)
	}
	if _, err := os.Lstat(dir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the tree is still there: %v", err)
	}
	if fi, err := os.Stat(outside); err != nil || fi.Mode().Perm() != 0o555 {
		t.Errorf("the directory a link pointed to: %v, %v; want it kept, 0555", fi.Mode(), err)
	}
	if _, err := os.Stat(filepath.Join(outside, "keep")); err != nil {
		t.Errorf("a file a link pointed to: %v", err)
	}
	if err := disk.RemoveAll(filepath.Join(base, "missing")); err != nil {
		t.Errorf("RemoveAll of nothing: %v", err)
	}
	nobody.Also(t)
}

// BenchmarkUsage measures a walk of a workspace of 10,000 files of 4 KiB
// in 100 directories: the cost the disk guard pays per sandbox per look.
func BenchmarkUsage(b *testing.B) {
	dir := b.TempDir()
	for d := range 100 {
		for f := range 100 {
			write(b, filepath.Join(dir, fmt.Sprint("d", d), fmt.Sprint("f", f)), 4<<10)
		}
	}
	// CPU time as well as wall time: on a loaded machine the wall time
	// says more about the neighbours than about the walk.
	before := cpuTime()
	n := 0
	for b.Loop() {
		if _, err := disk.Usage(dir); err != nil {
			b.Fatal(err)
		}
		n++
	}
	b.ReportMetric(float64((cpuTime()-before).Nanoseconds())/float64(n), "cpu-ns/op")
}

// cpuTime is the process's user and system time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
