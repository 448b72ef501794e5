package agent

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// TestFS drives fs/read_text_file and fs/write_text_file from a real agent
// process and checks what it is answered.
func TestFS(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "sandbox")
	writeFile(t, dir, "notes/a.txt", "one\ntwo\nthree\nfour\n")
	writeFile(t, root, "secret.txt", "outside\n")
	if err := os.Symlink(filepath.Join(root, "secret.txt"), filepath.Join(dir, "escape")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("notes/a.txt", filepath.Join(dir, "inside")); err != nil {
		t.Fatal(err)
	}
	c := MustStart(t, "fsprobe", dir)

	read := func(path string, extra ...any) map[string]any {
		p := map[string]any{"sessionId": "s1", "path": path}
		for i := 0; i+1 < len(extra); i += 2 {
			p[extra[i].(string)] = extra[i+1]
		}
		return map[string]any{"method": "fs/read_text_file", "params": p}
	}
	write := func(path, content string) map[string]any {
		return map[string]any{"method": "fs/write_text_file", "params": map[string]any{"sessionId": "s1", "path": path, "content": content}}
	}
	tests := []struct {
		name string
		req  map[string]any
		want string // the content read, "{}" for a write, or the error code
		code int
	}{
		{"ReadAbsoluteInside", read(filepath.Join(dir, "notes/a.txt")), "one\ntwo\nthree\nfour\n", 0},
		{"ReadRelative", read("notes/a.txt"), "one\ntwo\nthree\nfour\n", 0},
		{"ReadLineLimit", read("notes/a.txt", "line", 2, "limit", 2), "two\nthree\n", 0},
		{"ReadLinePastEnd", read("notes/a.txt", "line", 9), "", 0},
		{"ReadSymlinkInside", read(filepath.Join(dir, "inside")), "one\ntwo\nthree\nfour\n", 0},
		{"ErrDotDot", read(filepath.Join(dir, "../secret.txt")), "", codeInvalidParams},
		{"ErrDotDotRelative", read("notes/../../secret.txt"), "", codeInvalidParams},
		{"ErrAbsoluteOutside", read(filepath.Join(root, "secret.txt")), "", codeInvalidParams},
		{"ErrSymlinkEscape", read(filepath.Join(dir, "escape")), "", codeInvalidParams},
		// A missing file reads as empty, as in Zed: Gemini CLI reads the
		// file it is about to create and fails its write tool on an error.
		{"ReadMissing", read(filepath.Join(dir, "missing.txt")), "", 0},
		{"ReadMissingDir", read("no/such/dir/missing.txt"), "", 0},
		{"ErrMissingOutside", read(filepath.Join(root, "missing.txt")), "", codeInvalidParams},
		{"ErrMissingDotDot", read("notes/../../missing.txt"), "", codeInvalidParams},
		{"ErrDirectory", read(dir), "", codeInvalidParams},
		{"ErrWrongSession", map[string]any{"method": "fs/read_text_file", "params": map[string]any{"sessionId": "other", "path": "notes/a.txt"}}, "", codeInvalidParams},
		{"WriteNested", write(filepath.Join(dir, "new/dir/b.txt"), "bee\n"), "{}", 0},
		{"ErrWriteOutside", write(filepath.Join(root, "planted.txt"), "x"), "", codeInvalidParams},
		{"ErrWriteSymlinkEscape", write(filepath.Join(dir, "escape"), "x"), "", codeInvalidParams},
	}
	var reqs []map[string]any
	for _, tc := range tests {
		reqs = append(reqs, tc.req)
	}
	if err := c.Prompt("turn_1", string(mustJSON(reqs))); err != nil {
		t.Fatal(err)
	}
	answers := parseUpdate(t, next(t, c)).Update.Answers
	if got, want := len(answers), len(tests); got != want {
		t.Fatalf("%d answers, want %d", got, want)
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a := answers[i]
			if tc.code != 0 {
				if a.Error == nil || a.Error.Code != tc.code {
					t.Fatalf("answer %s %+v, want error %d", a.Result, a.Error, tc.code)
				}
				return
			}
			if a.Error != nil {
				t.Fatalf("error %+v", a.Error)
			}
			if tc.want == "{}" {
				if got := string(a.Result); got != "{}" {
					t.Fatalf("result = %s, want {}", got)
				}
				return
			}
			var r readResult
			mustUnmarshal(t, a.Result, &r)
			if got := r.Content; got != tc.want {
				t.Fatalf("content = %q, want %q", got, tc.want)
			}
		})
	}
	if b, err := os.ReadFile(filepath.Join(dir, "new/dir/b.txt")); err != nil || string(b) != "bee\n" {
		t.Fatalf("written file: %q, %v", b, err)
	}
	if b, _ := os.ReadFile(filepath.Join(root, "secret.txt")); string(b) != "outside\n" {
		t.Fatalf("file outside the sandbox changed: %q", b)
	}
	if _, err := os.Stat(filepath.Join(root, "planted.txt")); !os.IsNotExist(err) {
		t.Fatalf("file planted outside the sandbox: %v", err)
	}
}

func TestFSTooLarge(t *testing.T) {
	dir := t.TempDir()
	f, err := os.Create(filepath.Join(dir, "big.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(MaxReadFile + 1); err != nil { // sparse: no 16 MiB written
		t.Fatal(err)
	}
	f.Close()
	files, err := openFSRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer files.close()
	_, rpcErr := files.read("big.txt", nil, nil)
	if rpcErr == nil || rpcErr.Code != codeInvalidParams {
		t.Fatalf("err = %+v, want invalid params", rpcErr)
	}
}

func TestSliceLines(t *testing.T) {
	n := func(v int64) *int64 { return &v }
	const text = "a\nb\nc"
	for _, tc := range []struct {
		name        string
		line, limit *int64
		want        string
	}{
		{"All", nil, nil, text},
		{"FromLine", n(2), nil, "b\nc"},
		{"Limit", nil, n(2), "a\nb\n"},
		{"LineAndLimit", n(2), n(1), "b\n"},
		{"ZeroMeansAll", n(0), n(0), text},
		{"PastEnd", n(4), nil, ""},
		{"LimitPastEnd", n(3), n(10), "c"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := sliceLines(text, tc.line, tc.limit); got != tc.want {
				t.Fatalf("got %q, want %q", got, tc.want)
			}
		})
	}
}

func TestRequestIDMarshal(t *testing.T) {
	for _, raw := range []string{`0`, `"abc"`, `12345678901234567890`, `1.0`} {
		b, err := json.Marshal(RequestID{raw: json.RawMessage(raw)})
		if err != nil || string(b) != raw {
			t.Fatalf("marshal %s = %s, %v", raw, b, err)
		}
	}
}
