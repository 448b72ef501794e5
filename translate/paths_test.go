package translate

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sparkles-dev/sparkles/sandbox"
)

func TestRewritePaths(t *testing.T) {
	tr := New(Config{Dir: testDir, DataDir: testDataDir})
	const w = testDir
	for _, tt := range []struct{ name, in, want string }{
		{"File", "Write " + w + "/notes.txt", "Write notes.txt"},
		{"Nested", "Edit " + w + "/src/a.go", "Edit src/a.go"},
		{"WorkDir", "cd " + w, "cd ."},
		{"WorkDirTrailingSlash", "ls " + w + "/", "ls ./"},
		{"WorkDirEndsSentence", "I am in " + w + ".", "I am in ./."},
		{"WorkDirDot", "ls " + w + "/.", "ls ."},
		{"DoubleSlash", w + "//a.go", "a.go"},
		{"Quoted", `cat "` + w + `/a b.txt" '` + w + `/c'`, `cat "a b.txt" 'c'`},
		{"PathLine", w + "/src/a.go:12: undefined: x", "src/a.go:12: undefined: x"},
		{"Flag", "--dir=" + w + " --out=" + w + "/out", "--dir=. --out=out"},
		{"Parens", "(see " + w + "/README.md)", "(see README.md)"},
		{"FileURI", "file://" + w + "/a.go", "file://a.go"},
		{"NonASCIIName", w + "/café.txt", "café.txt"},
		{"TypographicQuotes", "“" + w + "”", "“.”"},
		{"Command", "/bin/bash -lc echo hello > " + w + "/notes.txt", "/bin/bash -lc echo hello > notes.txt"},
		{"Twice", w + "/a and " + w + "/b", "a and b"},
		{"Multiline", "wrote\n" + w + "/a\n" + w + "/b\n", "wrote\na\nb\n"},
		{"Parent", w + "/../home/.config", "../home/.config"},
		{"OtherSandbox", "cat " + testDataDir + "/sandboxes/c_2/work/secret.txt now", "cat " + DataDirPlaceholder + " now"},
		{"SiblingName", testDataDir + "/sandboxes/c_1/work2/x", DataDirPlaceholder},
		{"SiblingSandbox", testDataDir + "/sandboxes/c_10/work/x", DataDirPlaceholder},
		{"PrivateHome", "HOME=" + testDataDir + "/sandboxes/c_1/home", "HOME=" + DataDirPlaceholder},
		{"Token", "read " + testDataDir + "/token.", "read " + DataDirPlaceholder + "."},
		{"DataDir", "ls " + testDataDir, "ls " + DataDirPlaceholder},
		{"DataDirPathLine", testDataDir + "/sparkles.db:3", DataDirPlaceholder + ":3"},
		{"NotUnderDataDir", "/srv/database/x and /srv/data.bak and /srv/datadir", "/srv/database/x and /srv/data.bak and /srv/datadir"},
		{"InsideAnotherPath", "/mnt" + testDataDir + "/x and backup" + w, "/mnt" + testDataDir + "/x and backup" + w},
		{"OrdinaryText", "a/b, 1/2 and /etc/passwd: see docs/srv/data", "a/b, 1/2 and /etc/passwd: see docs/srv/data"},
		{"Slash", "/", "/"},
		{"Empty", "", ""},
		// Spellings cleaning changes are matched as cleaned.
		{"RepeatedSlashes", "//srv//data//sandboxes//c_1//work/a", "a"},
		{"DotSegments", "cd /srv/./data/sandboxes/c_1/./work", "cd ."},
		{"DotSegmentsNested", "cat /srv/data/./sandboxes/c_1/work/./src//a.go:3", "cat src//a.go:3"},
		{"UncleanWorkDirDot", "cd /srv/data//sandboxes/c_1/work/.", "cd ."},
		{"UncleanWorkDirTrailingSlash", "ls //srv//data/sandboxes/c_1/work//", "ls ./"},
		{"UncleanWorkDirTrailingDot", "ls /srv/data/sandboxes/c_1/work//./", "ls ."},
		{"UncleanWorkDirEndsSentence", "I am in /srv/data//sandboxes/c_1/work.", "I am in ./."},
		{"UncleanToken", "read //srv//data//token.", "read " + DataDirPlaceholder + "."},
		{"UncleanOtherSandbox", "x//srv//data/sandboxes/c_2", "x/" + DataDirPlaceholder},
		{"UncleanAfterWorkPath", w + "/a//srv//data/token", "a/" + DataDirPlaceholder},
		{"UncleanFileURI", "file:///srv//data/sandboxes/c_1/work/a.go", "file://a.go"},
		{"UncleanParent", "//srv//data//sandboxes//c_1//work/../home", "../home"},
		{"UncleanDotName", "/srv/data/sandboxes/c_1//work/.git/config", ".git/config"},
		{"UncleanNotUnderRoot", "https://example.com//a/./b and /srv/./database/x", "https://example.com//a/./b and /srv/./database/x"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := tr.redact(tt.in); got != tt.want {
				t.Fatalf("redact(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
	if got, want := tr.Stats().Redactions, 0; got != want {
		t.Fatalf("Redactions = %d, want %d: a path rewrite is not a redaction", got, want)
	}
	t.Run("SecretInPath", func(t *testing.T) {
		tr := New(Config{Dir: testDir, DataDir: testDataDir, Secrets: []string{testSecret}})
		for in, want := range map[string]string{
			w + "/" + testSecret + ".txt":                 Redacted + ".txt",
			testDataDir + "/x/" + testSecret + "/y":       Redacted,
			testDataDir + "/sandboxes/c_2/" + testSecret:  Redacted,
			"key " + testSecret + " in " + w + "/key.txt": "key " + Redacted + " in key.txt",
		} {
			if got := tr.redact(in); got != want {
				t.Fatalf("redact(%q) = %q, want %q", in, got, want)
			}
		}
	})
	t.Run("NoDataDir", func(t *testing.T) {
		tr := New(Config{Dir: testDir})
		in := "cat " + w + "/a " + testDataDir + "/token"
		if got, want := tr.redact(in), "cat a "+testDataDir+"/token"; got != want {
			t.Fatalf("redact(%q) = %q, want %q", in, got, want)
		}
	})
	t.Run("CutLeavesNoRoot", func(t *testing.T) {
		c := &clock{t: epoch}
		tr := newScripted(c)
		tr.StartTurn("turn_1", nil)
		// The bound cuts the title right after "/srv/data" of "/srv/database".
		head := strings.Repeat("x", maxTitleBytes-len("…")-len(testDataDir)-1) + " "
		title := head + testDataDir + "base/file"
		evs := tr.Update(json.RawMessage(fmt.Sprintf(`{"update":{"sessionUpdate":"tool_call","toolCallId":"t1","title":%q}}`, title)))
		got := evs[0].Data.(*sandbox.ToolUpdated).Title
		if want := head + DataDirPlaceholder + "…"; got != want {
			t.Fatalf("title ends %q, want %q", got[len(got)-20:], want[len(want)-20:])
		}
	})
	t.Run("RootDirIgnored", func(t *testing.T) {
		tr := New(Config{Dir: "/"})
		in := "/etc/passwd and /"
		if got := tr.redact(in); got != in {
			t.Fatalf("redact(%q) = %q, want it unchanged", in, got)
		}
	})
	t.Run("RelativeDirsMadeAbsolute", func(t *testing.T) {
		wd, err := os.Getwd()
		if err != nil {
			t.Fatal(err)
		}
		tr := New(Config{Dir: "data/sandboxes/c_1/work", DataDir: "data"})
		in := "wrote " + filepath.Join(wd, "data/sandboxes/c_1/work/a.go") + " and " + filepath.Join(wd, "data/token") + "; data/x stays"
		if got, want := tr.redact(in), "wrote a.go and "+DataDirPlaceholder+"; data/x stays"; got != want {
			t.Fatalf("redact(%q) = %q, want %q", in, got, want)
		}
	})
}

// TestRewritePathsSymlinked lays out a data dir reached through a symlink,
// as a /tmp that is a symlink does: the agent may report either form.
func TestRewritePathsSymlinked(t *testing.T) {
	base := t.TempDir()
	real := filepath.Join(base, "real")
	if err := os.MkdirAll(filepath.Join(real, "sandboxes", "c_1", "work"), 0o755); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(base, "link")
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	// base itself may sit under a symlink (a /tmp that is one).
	realBase, err := filepath.EvalSymlinks(base)
	if err != nil {
		t.Fatal(err)
	}
	real = filepath.Join(realBase, "real")
	for _, tt := range []struct{ name, id string }{
		{"Existing", "c_1"},
		// The work dir may not exist yet when the Translator is made.
		{"NotYetCreated", "c_9"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := filepath.Join(link, "sandboxes", tt.id, "work")
			tr := New(Config{Dir: dir, DataDir: link})
			realDir := filepath.Join(real, "sandboxes", tt.id, "work")
			for in, want := range map[string]string{
				"Write " + dir + "/notes.txt":                     "Write notes.txt",
				"Write " + realDir + "/notes.txt":                 "Write notes.txt",
				"cd " + realDir:                                   "cd .",
				"cat " + real + "/token and " + link + "/token":   "cat " + DataDirPlaceholder + " and " + DataDirPlaceholder,
				"ls " + filepath.Join(real, "sandboxes", "c_2"):   "ls " + DataDirPlaceholder,
				"ls " + filepath.Join(realBase, "elsewhere", "x"): "ls " + filepath.Join(realBase, "elsewhere", "x"),
				"see " + filepath.Join(real, "sandboxes", tt.id):  "see " + DataDirPlaceholder,
			} {
				if got := tr.redact(in); got != want {
					t.Fatalf("redact(%q) = %q, want %q", in, got, want)
				}
			}
			for in, want := range map[string]string{
				filepath.Join(dir, "a.go"):     "a.go",
				filepath.Join(realDir, "a.go"): "a.go",
				realDir:                        ".",
			} {
				if got, ok := tr.relPath(in); !ok || got != want {
					t.Fatalf("relPath(%q) = %q, %v, want %q, true", in, got, ok, want)
				}
			}
			if got, ok := tr.relPath(filepath.Join(real, "token")); ok {
				t.Fatalf("relPath(token) = %q, want it left out", got)
			}
		})
	}
}

func TestHoldPaths(t *testing.T) {
	r := newRedactor(nil, newPathRoots(testDir, testDataDir))
	for _, tt := range []struct{ in, want string }{
		{"see /", "see "},
		{"see /sr", "see "},
		{"see /srv/data/sandb", "see "},
		{"see " + testDir, "see "},
		{"see " + testDir + "/", "see "},
		{"see " + testDir + "/a.go", "see "},
		{"see " + testDir + "/a.go:", "see " + testDir + "/a.go:"},
		{"see " + testDir + "/a.go ok", "see " + testDir + "/a.go ok"},
		{"see " + testDataDir + ".", "see "},
		{"see " + testDataDir + "/token", "see "},
		{"see " + testDataDir + "base", "see " + testDataDir + "base"},
		{"see /etc/passwd", "see /etc/passwd"},
		{"and/", "and/"},
		{"a/b/c", "a/b/c"},
		{"x//srv/d", "x/"},
		{"(" + testDir + "/a", "("},
		{"see //srv//da", "see "},
		{"see /srv/./", "see "},
		{"see /srv/.", "see "},
		{"see /srv/data/.", "see "},
		{"see //srv/data", "see "},
		{"x//srv//d", "x/"},
		{"file:///srv//d", "file://"},
		{"see //etc//passwd", "see //etc//passwd"},
		{"see /srv/./database", "see /srv/./database"},
	} {
		if got := tt.in[:r.hold(tt.in)]; got != tt.want {
			t.Fatalf("hold(%q) keeps %q, want %q", tt.in, got, tt.want)
		}
	}
}

// TestStreamedPathsNeverShow streams texts holding paths under the roots,
// split at random places, and checks every snapshot: no piece of an absolute
// path shows before its rewrite, and every snapshot is a prefix of the
// final text.
func TestStreamedPathsNeverShow(t *testing.T) {
	texts := []struct{ in, want string }{
		{"I wrote " + testDir + "/notes.txt for you.", "I wrote notes.txt for you."},
		{"cwd is " + testDir + " then", "cwd is . then"},
		{"token at " + testDataDir + "/token, ok", "token at " + DataDirPlaceholder + ", ok"},
		{"other " + testDataDir + "/sandboxes/c_10/work/x.go:3 too", "other " + DataDirPlaceholder + ":3 too"},
		{"`" + testDir + "/a.go:12` and `" + testDir + "`.", "`a.go:12` and `.`."},
		{"ends with " + testDir + "/notes.txt", "ends with notes.txt"},
		{"I wrote //srv//data//sandboxes//c_1//work//notes.txt for you.", "I wrote notes.txt for you."},
		{"cwd is /srv/./data/sandboxes/c_1/work/. then", "cwd is . then"},
		{"token at //srv/data//./token, ok", "token at " + DataDirPlaceholder + ", ok"},
	}
	// The texts hold no slash but those of the roots, and no rewrite leaves
	// one, so a leak is any slash in a snapshot.
	leaky := func(s string) bool { return strings.ContainsAny(s, "/") }
	rng := rand.New(rand.NewPCG(3, 4))
	for _, text := range texts {
		for trial := range 100 {
			c := &clock{t: epoch}
			tr := New(Config{Now: c.Now, Dir: testDir, DataDir: testDataDir, FlushInterval: 1})
			tr.StartTurn("turn_1", nil)
			var snaps []string
			collect := func(evs []*sandbox.Event) {
				for _, ev := range evs {
					if d, ok := ev.Data.(*sandbox.MessageUpdated); ok {
						snaps = append(snaps, d.Text)
					}
				}
			}
			for rest := text.in; rest != ""; {
				n := 1 + rng.IntN(6)
				if trial == 0 {
					n = 1
				}
				n = min(n, len(rest))
				c.t = c.t.Add(1)
				collect(tr.Update(json.RawMessage(fmt.Sprintf(`{"update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":%q}}}`, rest[:n]))))
				rest = rest[n:]
			}
			collect(tr.EndTurn(TurnResult{StopReason: "end_turn"}))
			if got := snaps[len(snaps)-1]; got != text.want {
				t.Fatalf("final text of %q = %q, want %q", text.in, got, text.want)
			}
			for _, s := range snaps {
				if leaky(s) {
					t.Fatalf("streaming %q showed %q", text.in, s)
				}
				if !strings.HasPrefix(text.want, s) {
					t.Fatalf("streaming %q showed %q, not a prefix of the final %q", text.in, s, text.want)
				}
			}
		}
	}
}
