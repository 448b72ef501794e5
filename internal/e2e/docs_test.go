package e2e

import (
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// docPages are the Markdown pages whose links must hold: the README and
// every page of docs/, as paths from the module's root.
func docPages(t *testing.T) []string {
	t.Helper()
	pages, err := filepath.Glob(repoFile("docs/*.md"))
	if err != nil {
		t.Fatal(err)
	}
	if len(pages) == 0 {
		t.Fatal("docs/ holds no page")
	}
	rel := []string{"README.md"}
	for _, p := range pages {
		rel = append(rel, filepath.Join("docs", filepath.Base(p)))
	}
	return rel
}

// markdownLink is an inline link, [text](target); the text may span lines.
var markdownLink = regexp.MustCompile(`\[[^\]]*\]\(([^)\s]+)\)`)

// TestDocsLinks checks every relative link of the README and of docs/: its
// file is in the repository, and its #anchor is a heading of that file, as
// GitHub renders the page.
func TestDocsLinks(t *testing.T) {
	anchors := map[string]map[string]bool{} // by page, from the module's root
	anchorsOf := func(page string) map[string]bool {
		if a, ok := anchors[page]; ok {
			return a
		}
		b, err := os.ReadFile(repoFile(page))
		if err != nil {
			t.Fatal(err)
		}
		a := headingAnchors(string(b))
		anchors[page] = a
		return a
	}
	links := 0
	for _, page := range docPages(t) {
		b, err := os.ReadFile(repoFile(page))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range markdownLink.FindAllStringSubmatch(proseOf(string(b)), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			links++
			file, anchor, _ := strings.Cut(target, "#")
			dest := page
			if file != "" {
				if path.IsAbs(file) {
					t.Errorf("%s: link %q is absolute; link relative to the page", page, target)
					continue
				}
				dest = filepath.Join(filepath.Dir(page), filepath.FromSlash(file))
				abs := filepath.Join(moduleDir, dest)
				if !strings.HasPrefix(abs, moduleDir+string(filepath.Separator)) {
					t.Errorf("%s: link %q leaves the repository", page, target)
					continue
				}
				if _, err := os.Stat(abs); err != nil {
					t.Errorf("%s: link %q: no file %s", page, target, dest)
					continue
				}
			}
			if anchor == "" {
				continue
			}
			if !strings.HasSuffix(dest, ".md") {
				t.Errorf("%s: link %q: an anchor into a file that is not Markdown", page, target)
				continue
			}
			if !anchorsOf(dest)[anchor] {
				t.Errorf("%s: link %q: %s has no heading with the anchor %q", page, target, dest, anchor)
			}
		}
	}
	if links == 0 {
		t.Fatal("found no relative link at all: the link pattern is broken")
	}
}

// proseOf is a Markdown text without its fenced code blocks and inline code
// spans, where a bracket is not a link.
func proseOf(md string) string {
	var b strings.Builder
	fence := false
	for line := range strings.Lines(md) {
		if strings.HasPrefix(strings.TrimLeft(line, " "), "```") {
			fence = !fence
			b.WriteString("\n")
			continue
		}
		if fence {
			b.WriteString("\n")
			continue
		}
		b.WriteString(line)
	}
	return codeSpan.ReplaceAllString(b.String(), "")
}

var codeSpan = regexp.MustCompile("`[^`]*`")

// headingAnchors are the anchors GitHub gives the headings of a page:
// the heading's text in lower case, without punctuation but - and _, its
// spaces turned to -; a repeated anchor gets -1, -2, ….
func headingAnchors(md string) map[string]bool {
	anchors := map[string]bool{}
	seen := map[string]int{}
	fence := false
	for line := range strings.Lines(md) {
		line = strings.TrimRight(line, "\n")
		if strings.HasPrefix(strings.TrimLeft(line, " "), "```") {
			fence = !fence
			continue
		}
		if fence || headingLevel(line) == 0 {
			continue
		}
		slug := slugOf(strings.TrimRight(strings.TrimLeft(line, "# "), "# "))
		if n := seen[slug]; n > 0 {
			anchors[fmt.Sprintf("%s-%d", slug, n)] = true
		} else {
			anchors[slug] = true
		}
		seen[slug]++
	}
	return anchors
}

// inlineLink is a link inside a heading, whose text alone is rendered.
var inlineLink = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`)

func slugOf(heading string) string {
	heading = inlineLink.ReplaceAllString(heading, "$1")
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-', r == '_', unicode.IsLetter(r), unicode.IsDigit(r), unicode.IsMark(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

func TestDocsSlug(t *testing.T) {
	for _, c := range []struct{ heading, want string }{
		{"Agents: the registry, idle stops and continuity", "agents-the-registry-idle-stops-and-continuity"},
		{"`sparkles db stats`", "sparkles-db-stats"},
		{"`sandbox.error` codes", "sandboxerror-codes"},
		{"Durability: `sync_interval: always`", "durability-sync_interval-always"},
		{"Cursors and 410", "cursors-and-410"},
		{"See [the API](api.md) – now", "see-the-api--now"},
	} {
		if got := slugOf(c.heading); got != c.want {
			t.Errorf("slugOf(%q) = %q, want %q", c.heading, got, c.want)
		}
	}
	a := headingAnchors("# A\n\n```sh\n# A\n```\n\n## A\n### A!\n")
	for _, want := range []string{"a", "a-1", "a-2"} {
		if !a[want] {
			t.Errorf("headingAnchors lacks %q: %v", want, a)
		}
	}
	if a["a-3"] {
		t.Errorf("a comment in a code block was taken for a heading: %v", a)
	}
}

// TestDocsREADMEShort keeps the README a newcomer's page: the rest belongs
// in docs/.
func TestDocsREADMEShort(t *testing.T) {
	b, err := os.ReadFile(repoFile("README.md"))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(b), "\n"); n >= 250 {
		t.Fatalf("README.md has %d lines; keep it under 250 and move the rest into docs/", n)
	}
}

// TestDocsNoOutsideContract checks that no file of the repository refers
// to a contract document that does not ship with it: the contract is
// docs/, and references name its pages.
func TestDocsNoOutsideContract(t *testing.T) {
	// Spelled in parts, so that this file does not hold what it looks for.
	banned := []string{"SPEC " + "\u00a7", "SPEC" + ".md"}
	exts := map[string]bool{".go": true, ".md": true, ".js": true, ".mjs": true, ".ts": true,
		".html": true, ".css": true, ".yaml": true, ".yml": true, ".json": true}
	files := 0
	err := filepath.WalkDir(moduleDir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if p != moduleDir && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || d.Name() == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		if !exts[filepath.Ext(p)] {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		files++
		rel, _ := filepath.Rel(moduleDir, p)
		for i, line := range strings.Split(string(b), "\n") {
			for _, s := range banned {
				if strings.Contains(line, s) {
					t.Errorf("%s:%d refers to %q, which does not ship: link the page of docs/ that holds it", rel, i+1, s)
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 100 {
		t.Fatalf("read only %d files: the walk missed the repository", files)
	}
}
