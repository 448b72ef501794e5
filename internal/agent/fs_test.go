package agent

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/go-json-experiment/json/jsontext"
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
	if err := f.Truncate(MaxFSMessage + 1); err != nil { // sparse: nothing written
		t.Fatal(err)
	}
	f.Close()
	files, err := openFSRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer files.close()
	_, rpcErr := readText(t, files, "big.txt", nil, nil)
	if rpcErr == nil || rpcErr.Code != codeInvalidParams {
		t.Fatalf("err = %+v, want invalid params", rpcErr)
	}
	for _, want := range []string{"big.txt", "8 MiB", fmt.Sprintf("%d bytes", MaxFSMessage+1), "line and limit"} {
		if !strings.Contains(rpcErr.Message, want) {
			t.Errorf("message %q does not say %q", rpcErr.Message, want)
		}
	}
}

// TestFSReadHugeID refuses a read whose id alone would take the answer's
// room, even of a missing file, which reads as empty.
func TestFSReadHugeID(t *testing.T) {
	files, err := openFSRoot(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer files.close()
	id := json.RawMessage(`"` + strings.Repeat("x", MaxFSMessage) + `"`)
	if _, _, rpcErr := files.readAnswer(nil, id, "missing.txt", nil, nil); rpcErr == nil || rpcErr.Code != codeInvalidParams {
		t.Fatalf("err = %+v, want invalid params", rpcErr)
	}
}

// readText reads a file as fs/read_text_file answers it, checks that the
// answer is one JSON-RPC line of exactly the size it was given, and returns
// its content.
func readText(t testing.TB, files *fsRoot, path string, line, limit *int64) (string, *RPCError) {
	t.Helper()
	answer, release, rpcErr := files.readAnswer(nil, json.RawMessage(`"r1"`), path, line, limit)
	if rpcErr != nil {
		return "", rpcErr
	}
	release()
	if len(answer) != cap(answer) {
		t.Errorf("answer of %d bytes in a buffer of %d", len(answer), cap(answer))
	}
	if i := bytes.IndexByte(answer, '\n'); i != len(answer)-1 {
		t.Fatalf("answer is not one line: newline at %d of %d", i, len(answer))
	}
	var m struct {
		JSONRPC string          `json:"jsonrpc"`
		ID      json.RawMessage `json:"id"`
		Result  readResult      `json:"result"`
	}
	dec := json.NewDecoder(bytes.NewReader(answer))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		t.Fatalf("answer %.200q: %v", answer, err)
	}
	if m.JSONRPC != "2.0" || string(m.ID) != `"r1"` {
		t.Fatalf("answer %.200q: wrong envelope", answer)
	}
	return m.Result.Content, nil
}

// sliceLines is what fs/read_text_file answers, written plainly: the lines
// of s from the 1-based line on, at most limit of them.
func sliceLines(s string, line, limit *int64) string {
	skip, take := lineRange(line, limit)
	lines := strings.SplitAfter(s, "\n")
	if lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	if skip >= int64(len(lines)) {
		return ""
	}
	lines = lines[skip:]
	if take > 0 && take < int64(len(lines)) {
		lines = lines[:take]
	}
	// Each byte that is not UTF-8 becomes U+FFFD, as encoding/json has it.
	return string([]rune(strings.Join(lines, "")))
}

func TestReadLines(t *testing.T) {
	n := func(v int64) *int64 { return &v }
	dir := t.TempDir()
	const text = "a\nb\nc"
	writeFile(t, dir, "abc.txt", text)
	files, err := openFSRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer files.close()
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
		{"NegativeMeansAll", n(-3), n(-1), text},
		{"LastLine", n(3), nil, "c"},
		{"PastEnd", n(4), nil, ""},
		{"FarPastEnd", n(1 << 62), n(1 << 62), ""},
		{"LimitPastEnd", n(3), n(10), "c"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, rpcErr := readText(t, files, "abc.txt", tc.line, tc.limit)
			if rpcErr != nil {
				t.Fatal(rpcErr)
			}
			if got != tc.want {
				t.Fatalf("got %q, want %q", got, tc.want)
			}
			if want := sliceLines(text, tc.line, tc.limit); got != want {
				t.Fatalf("got %q, the plain slicing gives %q", got, want)
			}
		})
	}
}

// TestReadLinesAcrossChunks reads files whose lines, escapes and UTF-8
// characters straddle the chunks a file is read in, with every kind of
// line and limit, and compares with the plain slicing.
func TestReadLinesAcrossChunks(t *testing.T) {
	n := func(v int64) *int64 { return &v }
	dir := t.TempDir()
	files, err := openFSRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer files.close()
	long := strings.Repeat("x", fsChunk-1)
	texts := map[string]string{
		"runes":    strings.Repeat("é€😀\n\"\\\x00\t", 3*fsChunk/16),
		"long":     long + "€\n" + long + long + "😀\n\n" + long + "\xff\xfe\n" + "tail",
		"cut":      long + "\xe2\x82", // a character cut short at the end of the file
		"badutf8":  strings.Repeat("ok\xc3\x28\xa0\xa1\xf0\x28\x8c\xbc\n", fsChunk/4),
		"nolines":  strings.Repeat("\x01", 2*fsChunk+5),
		"newlines": strings.Repeat("\n", 2*fsChunk+3),
	}
	ranges := [][2]*int64{{nil, nil}, {n(2), nil}, {nil, n(1)}, {n(2), n(2)}, {n(3), n(1)}, {n(1000), n(7)}, {n(4000), nil}}
	for name, text := range texts {
		writeFile(t, dir, name, text)
		for _, r := range ranges {
			got, rpcErr := readText(t, files, name, r[0], r[1])
			if rpcErr != nil {
				t.Fatalf("%s %v: %v", name, r, rpcErr)
			}
			if want := sliceLines(text, r[0], r[1]); got != want {
				t.Fatalf("%s line %v limit %v: got %d bytes, want %d", name, deref(r[0]), deref(r[1]), len(got), len(want))
			}
		}
	}
}

func deref(p *int64) any {
	if p == nil {
		return nil
	}
	return *p
}

// TestQuote checks the JSON string encoding of file text against
// jsontext.AppendQuote, which writes the same minimal form (RFC 8785), and
// checks that quotedSize is what appendQuoted appends.
func TestQuote(t *testing.T) {
	for _, s := range []string{
		"", "plain", "<a href=\"x\">&amp;</a>", "tab\tnl\nret\rbs\\q\"", "\x00\x01\x1f\x7f",
		"\b\f", "é€😀", "\u2028\u2029", "\xff", "\xe2\x82", "a\xc3\x28b", "\xf0\x9f\x98",
	} {
		checkQuote(t, []byte(s))
	}
}

func FuzzQuote(f *testing.F) {
	f.Add([]byte("a\x00\"\\\n\xff€"))
	f.Fuzz(func(t *testing.T, b []byte) { checkQuote(t, b) })
}

func checkQuote(t *testing.T, b []byte) {
	t.Helper()
	got := appendQuoted(nil, b)
	if n := quotedSize(b); n != len(got) {
		t.Fatalf("%q: quotedSize %d, appendQuoted wrote %d bytes", b, n, len(got))
	}
	want, _ := jsontext.AppendQuote(nil, b) // an error only reports invalid UTF-8, replaced
	if want = want[1 : len(want)-1]; !bytes.Equal(got, want) {
		t.Fatalf("%q: quoted %q, jsontext quotes %q", b, got, want)
	}
	var s string
	if err := json.Unmarshal(append(append([]byte{'"'}, got...), '"'), &s); err != nil {
		t.Fatalf("%q: %q is not a JSON string: %v", b, got, err)
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

// TestWriteContent decodes the content of writes as encoding/json does,
// except JSON that is not UTF-8, which is refused.
func TestWriteContent(t *testing.T) {
	for _, tc := range []struct {
		name, json string
		want       string
		err        bool
	}{
		{"Plain", `"abc"`, "abc", false},
		{"Escapes", `"a\n\t\"\\\/\u00e9\ud83d\ude00"`, "a\n\t\"\\/é😀", false},
		{"Raw", `"é😀<>&"`, "é😀<>&", false},
		{"LoneSurrogate", `"a\ud800b"`, "a\uFFFDb", false},
		{"Null", `null`, "", false},
		{"ErrNotUTF8", "\"a\xffb\"", "", true},
		{"ErrNumber", `12`, "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var p writeParams
			err := json.Unmarshal([]byte(`{"content":`+tc.json+`}`), &p)
			if tc.err {
				if err == nil {
					t.Fatalf("decoded %q, want an error", p.Content)
				}
				return
			}
			if err != nil || string(p.Content) != tc.want {
				t.Fatalf("got %q, %v; want %q", p.Content, err, tc.want)
			}
		})
	}
}

func FuzzWriteContent(f *testing.F) {
	f.Add("a\n\"\\\x00é😀\u2028")
	f.Fuzz(func(t *testing.T, s string) {
		b, _ := json.Marshal(s)
		var want string
		if err := json.Unmarshal(b, &want); err != nil {
			t.Fatal(err)
		}
		var got fsText
		if err := json.Unmarshal(b, &got); err != nil || string(got) != want {
			t.Fatalf("%q: got %q, %v; want %q", b, got, err, want)
		}
	})
}

// TestWriteGivesToOwner: a root server writes a file the agent asked for
// (and the directories it needs) as the owner of the sandbox directory, the
// agent's uid, so that the agent can change it afterwards.
func TestWriteGivesToOwner(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("chown needs root (CI runs as root)")
	}
	dir := t.TempDir()
	const id = 2000000000
	if err := os.Chown(dir, id, id); err != nil {
		t.Fatal(err)
	}
	files, err := openFSRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer files.close()
	if err := files.write("a/b/notes.txt", []byte("x")); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"a", "a/b", "a/b/notes.txt"} {
		fi, err := os.Lstat(filepath.Join(dir, p))
		if err != nil {
			t.Fatal(err)
		}
		if st := fi.Sys().(*syscall.Stat_t); st.Uid != id || st.Gid != id {
			t.Errorf("%s is %d:%d, want the sandbox's owner %d:%d", p, st.Uid, st.Gid, id, id)
		}
	}
}
