package agent

import (
	"os"
	"path/filepath"
	"testing"
)

// TestFSConfinement tries the ways out of the sandbox directory that the
// end-to-end TestFS does not: symlinked directories, symlink chains,
// absolute symlinks, a sibling directory whose name extends the sandbox's,
// and writes that would create files or directories through any of them.
// Every one must be refused, and nothing outside may change.
func TestFSConfinement(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "sandbox")
	outside := filepath.Join(root, "outside")
	writeFile(t, dir, "notes/a.txt", "inside\n")
	writeFile(t, outside, "secret.txt", "outside\n")
	writeFile(t, root, "sandbox-evil/secret.txt", "sibling\n")
	for link, target := range map[string]string{
		"linkdir":   "../outside",
		"chain1":    "chain2",
		"chain2":    "../outside/secret.txt",
		"abslink":   filepath.Join(outside, "secret.txt"),
		"absdir":    outside,
		"insidedir": "notes",
		"loop":      "loop",
		// Dangling: what they point at does not exist, inside or out.
		"danglein":  "notes/missing.txt",
		"dangleout": "../outside/missing.txt",
		"dangleabs": filepath.Join(outside, "missing.txt"),
	} {
		if err := os.Symlink(target, filepath.Join(dir, link)); err != nil {
			t.Fatal(err)
		}
	}
	files, err := openFSRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer files.close()

	for _, tc := range []struct {
		name string
		path string
		code int // 0: the read succeeds with "inside\n"
	}{
		{"ErrDirSymlink", "linkdir/secret.txt", codeInvalidParams},
		{"ErrDirSymlinkAbsolute", filepath.Join(dir, "linkdir/secret.txt"), codeInvalidParams},
		{"ErrAbsoluteDirSymlink", "absdir/secret.txt", codeInvalidParams},
		{"ErrSymlinkChain", "chain1", codeInvalidParams},
		{"ErrAbsoluteSymlink", "abslink", codeInvalidParams},
		{"ErrSiblingPrefix", filepath.Join(root, "sandbox-evil/secret.txt"), codeInvalidParams},
		{"ErrDotDot", "..", codeInvalidParams},
		{"ErrDotDotThroughInside", "notes/../../outside/secret.txt", codeInvalidParams},
		{"ErrNUL", "notes/a.txt\x00", codeInvalidParams},
		{"ErrEmpty", "", codeInvalidParams},
		{"ErrRootDir", ".", codeInvalidParams},
		{"ErrSymlinkLoop", "loop", codeInternal}, // refused, if not as an escape
		{"DotDotStaysInside", filepath.Join(dir, "notes/../notes/a.txt"), 0},
		{"InsideDirSymlink", "insidedir/a.txt", 0},
	} {
		t.Run("Read"+tc.name, func(t *testing.T) {
			got, rpcErr := readText(t, files, tc.path, nil, nil)
			if tc.code == 0 {
				if rpcErr != nil || got != "inside\n" {
					t.Fatalf("read %q = %q, %+v", tc.path, got, rpcErr)
				}
				return
			}
			if rpcErr == nil || rpcErr.Code != tc.code {
				t.Fatalf("read %q = %q, %+v; want error %d", tc.path, got, rpcErr, tc.code)
			}
		})
	}

	// A missing file reads as empty, but only where the sandbox reaches: a
	// way out is refused even when nothing is at its end, so an empty
	// answer never says "this path leads somewhere you may read".
	for _, tc := range []struct {
		name string
		path string
		code int // 0: the read succeeds with ""
	}{
		{"Missing", "notes/missing.txt", 0},
		{"MissingAbsolute", filepath.Join(dir, "missing.txt"), 0},
		{"MissingParent", "nodir/missing.txt", 0},
		{"MissingThroughInsideDirSymlink", "insidedir/missing.txt", 0},
		{"DanglingInside", "danglein", 0},
		{"ErrMissingThroughDirSymlink", "linkdir/missing.txt", codeInvalidParams},
		{"ErrMissingThroughAbsoluteDirSymlink", "absdir/missing.txt", codeInvalidParams},
		{"ErrDanglingOutside", "dangleout", codeInvalidParams},
		{"ErrDanglingAbsolute", "dangleabs", codeInvalidParams},
		{"ErrMissingDotDot", "../outside/missing.txt", codeInvalidParams},
		{"ErrMissingAbsoluteOutside", filepath.Join(outside, "missing.txt"), codeInvalidParams},
		{"ErrMissingSiblingPrefix", filepath.Join(root, "sandbox-evil/missing.txt"), codeInvalidParams},
	} {
		t.Run("Read"+tc.name, func(t *testing.T) {
			got, rpcErr := readText(t, files, tc.path, nil, nil)
			if tc.code == 0 {
				if rpcErr != nil || got != "" {
					t.Fatalf("read %q = %q, %+v; want empty", tc.path, got, rpcErr)
				}
				return
			}
			if rpcErr == nil || rpcErr.Code != tc.code {
				t.Fatalf("read %q = %q, %+v; want error %d", tc.path, got, rpcErr, tc.code)
			}
		})
	}

	for _, tc := range []struct{ name, path string }{
		{"ErrDotDot", "../outside/planted.txt"},
		{"ErrDirSymlink", "linkdir/planted.txt"},
		{"ErrMkdirThroughDirSymlink", "linkdir/new/planted.txt"},
		{"ErrAbsoluteDirSymlink", "absdir/planted.txt"},
		{"ErrSymlinkChain", "chain1"},
		{"ErrAbsoluteSymlink", "abslink"},
		{"ErrSiblingPrefix", filepath.Join(root, "sandbox-evil/planted.txt")},
		{"ErrAbsoluteOutside", filepath.Join(outside, "planted.txt")},
	} {
		t.Run("Write"+tc.name, func(t *testing.T) {
			if rpcErr := files.write(tc.path, []byte("planted\n")); rpcErr == nil || rpcErr.Code != codeInvalidParams {
				t.Fatalf("write %q = %+v, want error %d", tc.path, rpcErr, codeInvalidParams)
			}
		})
	}
	t.Run("NothingOutsideChanged", func(t *testing.T) {
		for path, want := range map[string]string{
			filepath.Join(outside, "secret.txt"):              "outside\n",
			filepath.Join(root, "sandbox-evil", "secret.txt"): "sibling\n",
		} {
			if b, err := os.ReadFile(path); err != nil || string(b) != want {
				t.Fatalf("%s = %q, %v; want %q", path, b, err, want)
			}
		}
		for _, d := range []string{outside, filepath.Join(root, "sandbox-evil")} {
			entries, err := os.ReadDir(d)
			if err != nil {
				t.Fatal(err)
			}
			if got, want := len(entries), 1; got != want {
				t.Fatalf("%s holds %d entries, want %d: something was planted", d, got, want)
			}
		}
	})
	t.Run("WriteInsideDirSymlink", func(t *testing.T) {
		if rpcErr := files.write("insidedir/b.txt", []byte("bee\n")); rpcErr != nil {
			t.Fatalf("write through a symlink that stays inside: %+v", rpcErr)
		}
		if b, err := os.ReadFile(filepath.Join(dir, "notes", "b.txt")); err != nil || string(b) != "bee\n" {
			t.Fatalf("notes/b.txt = %q, %v", b, err)
		}
	})
}
