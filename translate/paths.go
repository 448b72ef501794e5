package translate

import (
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
// Regions do not overlap; at one position the working directory wins.
func (pr *pathRoots) regions(s string, out []region) []region {
	if len(pr.roots) == 0 || strings.IndexByte(s, '/') < 0 {
		return out
	}
	first := len(out)
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
			if !pathStart(s, p) || nameGoesOn(s, q) {
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

// hold returns where the end of an open part's text could still be, or
// grow into, a path under a root: the start of the trailing path that is a
// root's prefix or starts with a root. How it is rewritten depends on where
// it ends ("…/work" is ".", "…/work/a" is "a", "…/c_1" may become "…/c_10"),
// so it waits for the byte that ends it or for the part to close.
func (pr *pathRoots) hold(s string) int {
	if len(pr.roots) == 0 {
		return len(s)
	}
	k := len(s)
	for k > 0 && isPathChar(s[k-1]) {
		k--
	}
	for p := k; p < len(s); p++ {
		if s[p] != '/' || !pathStart(s, p) {
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
