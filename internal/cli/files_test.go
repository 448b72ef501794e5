package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"github.com/sparkles-dev/sparkles/client"
)

func TestFilesCommand(t *testing.T) {
	srv, id := startSandbox(t)
	ctx := testCtx(t)
	for p, body := range map[string]string{"b.txt": "hello", "src/main.go": "package main\n", "src/z.txt": "hello", "a dir/x": ""} {
		if _, err := srv.Client.WriteFile(ctx, id, p, strings.NewReader(body), client.WriteFileOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// One line per entry, sorted, sizes aligned to the right, the path
	// from the root last.
	line := regexp.MustCompile(`^([d-]) +(\S+)  \d{4}-\d\d-\d\d \d\d:\d\d  (.+)$`)
	check := func(r cliRun, want ...string) {
		t.Helper()
		lines := strings.Split(strings.TrimSuffix(r.out, "\n"), "\n")
		if len(lines) != len(want) {
			t.Fatalf("listing:\n%s\nwant %d lines", r.out, len(want))
		}
		for i, l := range lines {
			m := line.FindStringSubmatch(l)
			if m == nil {
				t.Fatalf("line %q is not type, size, time, path", l)
			}
			if got := m[1] + " " + m[2] + " " + m[3]; got != want[i] {
				t.Errorf("line %d = %q, want %q", i, got, want[i])
			}
		}
	}
	r := mustRun(t, srv.URL, "files", id)
	check(r, "d - a dir", "- 5 b.txt", "d - src")
	r = mustRun(t, srv.URL, "files", id+":src")
	check(r, "- 13 src/main.go", "- 5 src/z.txt")
	if lines := strings.Split(r.out, "\n"); !strings.HasPrefix(lines[0], "- 13  ") || !strings.HasPrefix(lines[1], "-  5  ") {
		t.Errorf("sizes are not aligned:\n%s", r.out)
	}
	check(mustRun(t, srv.URL, "files", "--sandbox", id, "a dir"), "- 0 a dir/x")

	r = mustRun(t, srv.URL, "files", id+":src", "--json")
	var list []client.FileEntry
	if err := json.Unmarshal([]byte(r.out), &list); err != nil || len(list) != 2 || list[0].Path != "src/main.go" || list[0].Size != 13 {
		t.Fatalf("--json = %s (%v)", r.out, err)
	}

	for arg, want := range map[string]string{
		id + ":b.txt": "is a file; `sparkles cp " + id + ":b.txt -` prints it",
		id + ":nope":  `no file or directory "nope" in the workspace; ` + "`sparkles files " + id + "` lists the workspace",
		id + ":../up": "outside the workspace",
	} {
		if _, err := runCLI(t, srv.URL, "", "files", arg); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("files %s: %v, want %q", arg, err, want)
		}
	}
}

func TestFilesPages(t *testing.T) {
	srv, id := startSandbox(t)
	ctx := testCtx(t)
	const n = 1005 // more than one page of the largest size
	for i := range n {
		if _, err := srv.Client.WriteFile(ctx, id, fmt.Sprintf("f%04d", i), strings.NewReader(""), client.WriteFileOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	r := mustRun(t, srv.URL, "files", id)
	lines := strings.Split(strings.TrimSuffix(r.out, "\n"), "\n")
	if len(lines) != n || !strings.HasSuffix(lines[n-1], "f1004") {
		t.Fatalf("%d lines, the last %q; want %d", len(lines), lines[len(lines)-1], n)
	}
}

func TestNoSandbox(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"object":"list","data":[{"id":"c_1","status":"deleted"}],"has_more":false}`)
	}))
	defer srv.Close()
	t.Setenv("SPARKLES_SANDBOX", "")
	if _, err := runCLI(t, srv.URL, "", "files"); err == nil || !strings.Contains(err.Error(), "there is no sandbox") {
		t.Fatalf("files without a sandbox: %v", err)
	}
}

func TestSandboxCreateGit(t *testing.T) {
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got = append(got, string(b))
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, `{"id":"c_1","object":"sandbox","status":"creating","status_detail":"cloning https://example.com/r.git",`+
			`"source":{"git":{"url":"https://example.com/r.git","ref":"v1.2"}},"stream_token":"st"}`)
	}))
	defer srv.Close()
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--git", "https://example.com/r.git"}, `{"source":{"git":{"url":"https://example.com/r.git"}}}`},
		{[]string{"--git", "https://example.com/r.git#v1.2", "--git-depth", "1"}, `{"source":{"git":{"url":"https://example.com/r.git","ref":"v1.2","depth":1}}}`},
		{[]string{"--git", "https://example.com/r.git#feature/x"}, `{"source":{"git":{"url":"https://example.com/r.git","ref":"feature/x"}}}`},
	} {
		got = nil
		r, err := runCLI(t, srv.URL, "", append([]string{"sandbox", "create"}, tt.args...)...)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 1 || got[0] != tt.want {
			t.Errorf("create %q sent %q, want %s", tt.args, got, tt.want)
		}
		if !strings.Contains(r.out, "source        git https://example.com/r.git#v1.2\n") || !strings.Contains(r.out, "creating (cloning https://example.com/r.git)") {
			t.Errorf("create printed:\n%s", r.out)
		}
	}
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--git-depth", "1"}, "--git-depth needs --git"},
		{[]string{"--git", "https://example.com/r.git#"}, "want URL or URL#REF"},
		{[]string{"--git", "https://example.com/r.git", "--git-depth", "-1"}, "--git-depth -1"},
	} {
		got = nil
		_, err := runCLI(t, srv.URL, "", append([]string{"sandbox", "create"}, tt.args...)...)
		if _, usage := err.(usageError); !usage || !strings.Contains(err.Error(), tt.want) || len(got) != 0 {
			t.Errorf("create %q: %v (sent %q), want a usage error saying %q", tt.args, err, got, tt.want)
		}
	}
}
