//go:build linux

package confine

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestGather: what the launcher binds into the agent's root comes
// outermost first (a writable path inside a read-only tree lands on top of
// it), paths the system directories show already are not bound again, and
// a protected path inside a given tree is covered.
func TestGather(t *testing.T) {
	base := t.TempDir()
	tree := filepath.Join(base, "opt-like")
	data := filepath.Join(tree, "data")
	work := filepath.Join(data, "sandboxes", "c_1", "work")
	if err := os.MkdirAll(work, 0o700); err != nil {
		t.Fatal(err)
	}
	sp := &spec{
		Read:    []string{tree, "/usr/bin", filepath.Join(base, "missing")},
		Own:     []string{work},
		Protect: []string{data},
	}
	gs, _, err := gather(sp)
	for _, g := range gs {
		if g.fd >= 0 {
			unix.Close(g.fd)
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	var order []string
	for i, g := range gs {
		order = append(order, g.path)
		if i > 0 && strings.Count(g.path, "/") < strings.Count(gs[i-1].path, "/") {
			t.Errorf("%s comes after the deeper %s", g.path, gs[i-1].path)
		}
		switch g.path {
		case tree:
			if g.rw || g.hide || !g.dir {
				t.Errorf("read path: %+v", g)
			}
		case data:
			if !g.hide {
				t.Errorf("the protected path inside a read path is not covered: %+v", g)
			}
		case work:
			if !g.rw {
				t.Errorf("the work dir is not writable: %+v", g)
			}
		}
	}
	for _, want := range []string{tree, data, work} {
		if !slices.Contains(order, want) {
			t.Errorf("%s not given: %q", want, order)
		}
	}
	for _, no := range []string{"/usr/bin", filepath.Join(base, "missing")} {
		if slices.Contains(order, no) {
			t.Errorf("%s given: %q", no, order)
		}
	}
}
