package benchtree_test

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/sparkles-dev/sparkles/internal/benchtree"
)

func TestWrite(t *testing.T) {
	dir := t.TempDir()
	s := benchtree.Spec{Files: 200, Dirs: 7, Bytes: 2 << 20}
	if err := benchtree.Write(dir, s); err != nil {
		t.Fatal(err)
	}
	seen := map[string]string{}
	var all []byte
	for i := range s.Files {
		data, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(s.Path(i))))
		if err != nil {
			t.Fatal(err)
		}
		if got, want := len(data), s.PerFile(); got != want {
			t.Fatalf("%s has %d bytes, want %d", s.Path(i), got, want)
		}
		if other, ok := seen[string(data)]; ok {
			t.Fatalf("%s and %s are the same", s.Path(i), other)
		}
		seen[string(data)] = s.Path(i)
		all = append(all, data...)
	}
	dirs, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := len(dirs), s.Dirs; got != want {
		t.Fatalf("%d directories, want %d", got, want)
	}
	// Source code compresses about 4:1; noise would not, one repeated
	// line far more.
	var z bytes.Buffer
	zw := gzip.NewWriter(&z)
	zw.Write(all)
	zw.Close()
	if ratio := float64(len(all)) / float64(z.Len()); ratio < 3 || ratio > 6 {
		t.Fatalf("compresses %.1f:1, want about 4:1", ratio)
	}
}

func TestEdit(t *testing.T) {
	dir := t.TempDir()
	s := benchtree.Spec{Files: 50, Dirs: 5, Bytes: 50 << 10}
	if err := benchtree.Write(dir, s); err != nil {
		t.Fatal(err)
	}
	for round := range 3 {
		paths, err := benchtree.Edit(dir, s, round, benchtree.Changed)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := len(paths), benchtree.Changed; got != want {
			t.Fatalf("round %d edited %d files, want %d", round, got, want)
		}
		for _, p := range paths {
			data, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(p)))
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Contains(data, fmt.Appendf(nil, "edited in round %d\n", round)) || len(data) <= s.PerFile() {
				t.Fatalf("round %d: %s not edited", round, p)
			}
		}
	}
}

func TestWriteBadSpec(t *testing.T) {
	if err := benchtree.Write(t.TempDir(), benchtree.Spec{Files: 10, Dirs: 101, Bytes: 1 << 10}); err == nil {
		t.Fatal("wrote a tree in more directories than paths can name")
	}
}
