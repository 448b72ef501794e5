// Package benchtree writes the workspace that the figures of issue 28 are
// measured on: a turn boundary (a snapshot), its diff and change list, and
// the archive of the whole tree. The go benchmarks of internal/snapshot
// and internal/workspace and the workspace scenario of `sparkles bench`
// all measure this one tree, so their figures compare.
//
// The files are distinct (each begins with a line naming it), so a
// snapshot store keeps every blob, as it would for a real repository; and
// they are text like source code, words from a small vocabulary, so they
// compress as a repository does (about 4:1), not as noise or as one line
// repeated.
package benchtree

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Spec sizes a tree.
type Spec struct {
	Files int   // regular files
	Dirs  int   // directories holding them, at most 100
	Bytes int64 // all files together, spread evenly
}

// Full is the workspace of the targets: 10,000 files, 200 MiB, in 100
// directories.
var Full = Spec{Files: 10_000, Dirs: 100, Bytes: 200 << 20}

// Changed is how many files a turn of the targets edits.
const Changed = 10

// PerFile is the size of each file.
func (s Spec) PerFile() int { return int(s.Bytes / int64(s.Files)) }

// Path is file i's path, slash separated, relative to the tree.
func (s Spec) Path(i int) string {
	return fmt.Sprintf("pkg%02d/sub/file%05d.go", i%s.Dirs, i)
}

// Write fills dir, which must exist, with the tree, and dates every file
// an hour back: a workspace that was there before the turn, whose files a
// snapshot need not hash twice for having just been written.
func Write(dir string, s Spec) error {
	if s.Files <= 0 || s.Dirs <= 0 || s.Dirs > 100 || s.Bytes < int64(s.Files) {
		return fmt.Errorf("benchtree: bad spec %+v", s)
	}
	per := s.PerFile()
	rng := rand.New(rand.NewPCG(1, 2))
	text := sourceText(rng, max(1<<20, 2*per))
	old := time.Now().Add(-time.Hour)
	buf := make([]byte, 0, per)
	for i := range s.Files {
		p := filepath.Join(dir, filepath.FromSlash(s.Path(i)))
		if i < s.Dirs {
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				return err
			}
		}
		buf = fmt.Appendf(buf[:0], "// %s\n", s.Path(i))
		off := rng.IntN(len(text) - per)
		buf = append(buf, text[off:off+per-len(buf)]...)
		if err := os.WriteFile(p, buf, 0o644); err != nil {
			return err
		}
		if err := os.Chtimes(p, old, old); err != nil {
			return err
		}
	}
	return nil
}

// sourceText is n bytes of words like those of Go source.
func sourceText(rng *rand.Rand, n int) string {
	words := strings.Fields("func return if else for range package import type struct interface err nil " +
		"string int byte error context ctx value name path file dir write read open close := = { } ( ) , .")
	var sb strings.Builder
	sb.Grow(n + 16)
	for sb.Len() < n {
		sb.WriteString(words[rng.IntN(len(words))])
		// Lines of about 40 characters, so that a diff shows the lines
		// an edit touched, not the whole file.
		if rng.IntN(8) == 0 {
			sb.WriteString("\n\t")
		} else {
			sb.WriteByte(' ')
		}
	}
	return sb.String()
}

// Edit changes n files of the tree in dir in their middle, as an agent's
// edit does, and answers their paths. Each round edits other files, the
// round named in the inserted line.
func Edit(dir string, s Spec, round, n int) ([]string, error) {
	paths := make([]string, 0, n)
	for k := range n {
		rel := s.Path((round*n + k*997) % s.Files)
		p := filepath.Join(dir, filepath.FromSlash(rel))
		data, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		mid := len(data) / 2
		out := append(append(data[:mid:mid], fmt.Sprintf("edited in round %d\n", round)...), data[mid:]...)
		if err := os.WriteFile(p, out, 0o644); err != nil {
			return nil, err
		}
		paths = append(paths, rel)
	}
	return paths, nil
}
