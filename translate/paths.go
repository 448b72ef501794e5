package translate

import (
	"cmp"
	"path/filepath"
	"slices"
	"strings"
)

// DataDirPlaceholder is what an absolute path under the data directory but
// outside the sandbox's working directory becomes: another sandbox's files,
// the token, the database. The whole path goes, not only its prefix, so
// neither the host's layout nor another sandbox's id or file names show.
const DataDirPlaceholder = "[data-dir]"

// pathRoots are the absolute directories that must not show in outgoing
// text: the sandbox's working directory, rewritten relative to itself, and
// the data directory, replaced by DataDirPlaceholder. Each is kept as given
// and symlink-resolved, since agents often report realpaths (a /tmp that is a
// symlink, a data dir reached through one).
type pathRoots struct {
	roots []string // the working directory's forms, then the data directory's; longest first in each
	nwork int      // how many of roots are the working directory's
}

func newPathRoots(dir, dataDir string) pathRoots {
	var pr pathRoots
	seen := map[string]bool{}
	add := func(p string) {
		if p == "" {
			return
		}
		// A relative --data-dir still gives the agent an absolute cwd.
		if abs, err := filepath.Abs(p); err == nil {
			p = abs
		}
		from := len(pr.roots)
		for _, q := range []string{p, realPath(p)} {
			if usableRoot(q) && !seen[q] {
				seen[q] = true
				pr.roots = append(pr.roots, q)
			}
		}
		slices.SortStableFunc(pr.roots[from:], func(a, b string) int { return len(b) - len(a) })
	}
	add(dir)
	pr.nwork = len(pr.roots)
	add(dataDir)
	return pr
}

// work returns the working directory's forms.
func (pr *pathRoots) work() []string { return pr.roots[:pr.nwork] }

// usableRoot rejects roots that would rewrite every absolute path ("/") or
// none reliably (relative ones).
func usableRoot(p string) bool {
	return filepath.IsAbs(p) && p != string(filepath.Separator) && strings.IndexByte(p, 0) < 0
}

// realPath resolves the symlinks of p, or of its longest existing ancestor
// when p does not exist yet. With filepath.Abs above, it is the one place
// the package touches the file system, once per root when the Translator is
// made.
func realPath(p string) string {
	rest := ""
	for q := p; ; {
		if r, err := filepath.EvalSymlinks(q); err == nil {
			return filepath.Join(r, rest)
		}
		parent := filepath.Dir(q)
		if parent == q {
			return p
		}
		rest = filepath.Join(filepath.Base(q), rest)
		q = parent
	}
}

// isPathChar tells the bytes an absolute path written in text is made of.
// Whitespace, quotes, brackets, shell punctuation, ':' (path:line) and '='
// (--dir=/x) end it, and so does any non-ASCII byte: a typographic quote is
// more likely after a path in agent prose than a non-ASCII file name, and
// the rewrite of a path under the working directory only strips its prefix,
// so such a name still reads whole.
func isPathChar(c byte) bool {
	return c > ' ' && c < 0x7f && strings.IndexByte("\"'`<>()[]{}|&;,*?!$\\:=", c) < 0
}

// isNameChar is a path byte that continues a file name.
func isNameChar(c byte) bool { return c != '/' && isPathChar(c) }

// pathStart reports whether an absolute path may start at s[p]: not in the
// middle of a name ("/mnt/srv" holds no "/srv"), but after a slash, so a
// file:// URI is rewritten too.
func pathStart(s string, p int) bool { return p == 0 || !isNameChar(s[p-1]) }

// nameGoesOn reports whether the name ending at s[q] goes on: "work2" and
// "work.bak" are other names than "work", but the full stop of "…/work." ends
// a sentence.
func nameGoesOn(s string, q int) bool {
	if q >= len(s) || !isNameChar(s[q]) {
		return false
	}
	e := q
	for e < len(s) && s[e] == '.' {
		e++
	}
	return e < len(s) && isPathChar(s[e])
}

// regions appends the rewrites of the absolute paths of s that start with a
// root: the working directory's prefix becomes nothing ("…/work/src/a.go" is
// "src/a.go"), the directory itself "." ("./" before a full stop, so it does
// not read ".."), and a whole path under the data directory the placeholder.
// A path spelled with repeated slashes or "." segments
// ("//srv//data/./token") is matched as cleaning spells it (see
// cleanRegions). Regions do not overlap; at one position the working
// directory wins.
func (pr *pathRoots) regions(s string, out []region) []region {
	if len(pr.roots) == 0 || strings.IndexByte(s, '/') < 0 {
		return out
	}
	first := len(out)
	out = pr.match(s, func(p int) bool { return pathStart(s, p) }, out)
	if runs := uncleanRuns(s); len(runs) > 0 {
		// In an unclean run the cleaned spelling decides: it finds every
		// root the literal one does, and more.
		kept := out[:first]
		for _, g := range out[first:] {
			i, _ := slices.BinarySearchFunc(runs, g.a, func(r [2]int, a int) int { return cmp.Compare(r[1], a+1) })
			if i == len(runs) || g.a < runs[i][0] {
				kept = append(kept, g)
			}
		}
		out = kept
		for _, r := range runs {
			out = pr.cleanRegions(s, r[0], r[1], out)
		}
	}
	found := out[first:]
	if len(found) < 2 {
		return out
	}
	// Stable: at one start the working directory, found first, wins.
	slices.SortStableFunc(found, func(x, y region) int { return x.a - y.a })
	kept := found[:1]
	for _, g := range found[1:] {
		if g.a >= kept[len(kept)-1].b {
			kept = append(kept, g)
		}
	}
	return out[:first+len(kept)]
}

// match appends, unsorted, a region for each place of s where a root
// starts (start tells where a path may) and its last name ends.
func (pr *pathRoots) match(s string, start func(p int) bool, out []region) []region {
	for i, root := range pr.roots {
		work := i < pr.nwork
		for off := 0; off < len(s); {
			j := strings.Index(s[off:], root)
			if j < 0 {
				break
			}
			p := off + j
			off = p + 1
			q := p + len(root)
			if !start(p) || nameGoesOn(s, q) {
				continue
			}
			if !work {
				e := q
				for e < len(s) && isPathChar(s[e]) {
					e++
				}
				for e > q && s[e-1] == '.' {
					e--
				}
				out = append(out, region{a: p, b: e, repl: DataDirPlaceholder})
				continue
			}
			r := q
			for r < len(s) && s[r] == '/' {
				r++
			}
			switch {
			case r > q && r < len(s) && isPathChar(s[r]):
				out = append(out, region{a: p, b: r})
			case q < len(s) && s[q] == '.':
				out = append(out, region{a: p, b: q, repl: "./"})
			default:
				out = append(out, region{a: p, b: q, repl: "."})
			}
		}
	}
	return out
}

// uncleanRuns returns the runs of path bytes of s, as [start, end), that
// cleaning would spell otherwise: with a repeated slash or a "." segment.
// A root never shows in such a spelling literally, so the literal match
// alone would let "//srv//data//token" or "/srv/./data/token" through.
func uncleanRuns(s string) [][2]int {
	if !strings.Contains(s, "//") && !strings.Contains(s, "/.") {
		return nil
	}
	var runs [][2]int
	for i := 0; i < len(s); {
		if !isPathChar(s[i]) {
			i++
			continue
		}
		j := i
		for j < len(s) && isPathChar(s[j]) {
			j++
		}
		if unclean(s[i:j]) {
			runs = append(runs, [2]int{i, j})
		}
		i = j
	}
	return runs
}

func unclean(t string) bool {
	return strings.Contains(t, "//") || strings.Contains(t, "/./") || strings.HasSuffix(t, "/.")
}

// cleanPath spells a run of path bytes t as path.Clean would, but for
// "..", which it keeps (a ".." after the working directory reads as
// relative text, "../home", as it does when spelled cleanly): each run of
// slashes and "." segments becomes one slash, but none at the end of t
// when it holds a "." segment ("…/work/." is "…/work").
// at[i] is the index in t that c[i] stands for, at[len(c)] is len(t). A
// slash stands for its last slash, after which a path starts as after "//"
// in s (see pathStart; joined tells the slashes that stood for more than
// one byte), but at the start of t for its first: "//srv/data" is one
// path, not "/" and a path; after a URI's scheme (uri: t follows a ':'),
// "file:///srv/data" keeps its "//" as the literal match keeps it.
func cleanPath(t string, uri bool) (c string, at []int32, joined []bool) {
	b := make([]byte, 0, len(t))
	at = make([]int32, 0, len(t)+1)
	joined = make([]bool, 0, len(t))
	for i := 0; i < len(t); {
		if t[i] != '/' {
			b, at, joined = append(b, t[i]), append(at, int32(i)), append(joined, false)
			i++
			continue
		}
		j, last, dots := i+1, i, false
		for j < len(t) {
			if t[j] == '/' {
				last = j
			} else if t[j] == '.' && (j+1 == len(t) || t[j+1] == '/') {
				dots = true
			} else {
				break
			}
			j++
		}
		if j == len(t) && dots {
			break
		}
		if i == 0 && !uri {
			last = 0
		}
		b, at, joined = append(b, '/'), append(at, int32(last)), append(joined, j-i > 1)
		i = j
	}
	return string(b), append(at, int32(len(t))), joined
}

// cleanRegions appends the rewrites of the run s[r0:r1] as cleaning spells
// it, in the run's own bytes. A region covers what its rewrite stands for
// in the unclean spelling: the directory itself with the slashes and "."
// segments after it ("…//work/./" is "./"), a prefix with the separator
// after it, a data-dir path to its end.
func (pr *pathRoots) cleanRegions(s string, r0, r1 int, out []region) []region {
	c, at, joined := cleanPath(s[r0:r1], r0 > 0 && s[r0-1] == ':')
	from := len(out)
	out = pr.match(c, func(p int) bool { return p == 0 || !isNameChar(c[p-1]) || joined[p] }, out)
	for k := from; k < len(out); k++ {
		g := &out[k]
		b := int(at[g.b])
		if g.repl == "." {
			// Nothing, or one slash, follows the directory in c.
			if g.b < len(c) {
				g.repl = "./"
			}
			b = r1 - r0
		}
		g.a, g.b = r0+int(at[g.a]), r0+b
	}
	return out
}

// hold returns where the end of an open part's text could still be, or
// grow into, a path under a root: the start of the trailing path that is a
// root's prefix or starts with a root. How it is rewritten depends on where
// it ends ("…/work" is ".", "…/work/a" is "a", "…/c_1" may become "…/c_10"),
// so it waits for the byte that ends it or for the part to close. A
// trailing path with repeated slashes or "." segments is judged as
// cleaning spells it, and one that ends in "/." as if without it (it may
// still be "/./").
func (pr *pathRoots) hold(s string) int {
	if len(pr.roots) == 0 {
		return len(s)
	}
	k := len(s)
	for k > 0 && isPathChar(s[k-1]) {
		k--
	}
	h := pr.holdFrom(s, k, func(p int) bool { return pathStart(s, p) })
	if !unclean(s[k:]) {
		return h
	}
	// The rewrite of an unclean run may start before the literal one.
	c, at, joined := cleanPath(s[k:], k > 0 && s[k-1] == ':')
	if p := pr.holdFrom(c, 0, func(p int) bool { return p == 0 || !isNameChar(c[p-1]) || joined[p] }); p < len(c) {
		h = min(h, k+int(at[p]))
	}
	return h
}

// holdFrom returns the first path start at or after k whose rest of s is
// a root's prefix or starts with a root, else len(s).
func (pr *pathRoots) holdFrom(s string, k int, start func(p int) bool) int {
	for p := k; p < len(s); p++ {
		if s[p] != '/' || !start(p) {
			continue
		}
		rest := s[p:]
		for _, root := range pr.roots {
			if len(rest) <= len(root) {
				if strings.HasPrefix(root, rest) {
					return p
				}
			} else if strings.HasPrefix(rest, root) && !nameGoesOn(s, p+len(root)) {
				return p
			}
		}
	}
	return len(s)
}
