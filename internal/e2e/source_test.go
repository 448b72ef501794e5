//go:build linux

package e2e

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sparkles-dev/sparkles/internal/confine"
	"github.com/sparkles-dev/sparkles/internal/gittest"
	"github.com/sparkles-dev/sparkles/sandbox"
)

// TestGitSourceServe creates sandboxes from repositories of a git server
// on the host's loopback with the real `sparkles serve`, confined (the
// default): git runs through the launcher as the agent does, its files
// are the agent's, and it reaches the server only through the port the
// agent's registry entry gives it.
func TestGitSourceServe(t *testing.T) {
	srv := gittest.NewServer(t)
	dataDir, file := t.TempDir(), filepath.Join(t.TempDir(), "agents.json")
	demo := func(hostPorts ...int) map[string]any {
		return map[string]any{"command": binary, "args": []string{"agent", "demo"}, "host_ports": hostPorts}
	}
	b, _ := json.Marshal(map[string]any{"agents": map[string]any{"demo": demo(srv.Port), "walled": demo()}})
	if err := os.WriteFile(file, b, 0o600); err != nil {
		t.Fatal(err)
	}
	p := startServe(t, cliEnv(t), dataDir, "source-token", "--agents-file", file)
	p.waitServing()

	t.Run("Public", func(t *testing.T) {
		var sb sandbox.Sandbox
		p.mustCall(http.MethodPost, "/v1/sandboxes", map[string]any{"source": map[string]any{"git": map[string]any{"url": srv.Public(), "depth": 1}}}, http.StatusCreated, &sb)
		if st := waitSettled(t, p, sb.ID); st.Status != sandbox.StatusReady {
			t.Fatalf("sandbox %s (%s), want ready\n%s", st.Status, st.Detail, p.logTail())
		}
		status, body, hdr := getRaw(t, p, "/v1/sandboxes/"+sb.ID+"/files/a.txt")
		if status != http.StatusOK || body != "two\n" || !strings.HasPrefix(hdr.Get("Content-Type"), "text/plain") {
			t.Errorf("GET files/a.txt: %d %q (%s), want 200 main's a.txt", status, body, hdr.Get("Content-Type"))
		}
		fi, err := os.Lstat(filepath.Join(dataDir, "sandboxes", sb.ID, "work", "a.txt"))
		if err != nil {
			t.Fatal(err)
		}
		if uid, want := int(fi.Sys().(*syscall.Stat_t).Uid), agentUID(); uid != want {
			t.Errorf("the clone's a.txt is uid %d's, want the agent's %d", uid, want)
		}
		var got sandbox.Sandbox
		p.mustCall(http.MethodGet, "/v1/sandboxes/"+sb.ID, nil, http.StatusOK, &got)
		if got.Source == nil || got.Source.Git == nil || got.Source.Git.URL != srv.Public() || got.Source.Git.Depth != 1 {
			t.Errorf("the sandbox's source %+v, want %s at depth 1", got.Source, srv.Public())
		}
	})

	// An agent without the port: git is confined to the agent's network
	// and does not reach the host's loopback.
	t.Run("NoHostPort", func(t *testing.T) {
		var sb sandbox.Sandbox
		p.mustCall(http.MethodPost, "/v1/sandboxes", map[string]any{"agent": "walled", "source": map[string]any{"git": map[string]any{"url": srv.Public()}}}, http.StatusCreated, &sb)
		if st := waitSettled(t, p, sb.ID); st.Status != sandbox.StatusFailed || !strings.Contains(st.Detail, "could not reach the git server "+strings.TrimPrefix(srv.URL, "http://")) {
			t.Fatalf("sandbox %s (%s), want failed, the server unreachable\n%s", st.Status, st.Detail, p.logTail())
		}
	})

	t.Run("WrongToken", func(t *testing.T) {
		const wrong = "ghp_wrongTokenOfTheServe0123456789abcd"
		var sb sandbox.Sandbox
		p.mustCall(http.MethodPost, "/v1/sandboxes", map[string]any{
			"source":  map[string]any{"git": map[string]any{"url": srv.Private()}},
			"secrets": map[string]string{"GIT_TOKEN": wrong},
		}, http.StatusCreated, &sb)
		if st := waitSettled(t, p, sb.ID); st.Status != sandbox.StatusFailed || !strings.Contains(st.Detail, "refused the credential") {
			t.Fatalf("sandbox %s (%s), want failed for the credential\n%s", st.Status, st.Detail, p.logTail())
		}
		// git was given the token, so its absence below means something.
		header := "Basic " + base64.StdEncoding.EncodeToString([]byte("x-access-token:"+wrong))
		if !slices.Contains(srv.Auth(), header) {
			t.Fatalf("the git server never saw the credential: %q", srv.Auth())
		}
		var se *sandbox.SandboxError
		for _, ev := range readEventLog(t, p, sb.ID) {
			if d, ok := ev.Data.(*sandbox.SandboxError); ok {
				se = d
			}
		}
		if se == nil || se.Code != sandbox.ErrSourceFailed || !strings.Contains(se.Message, "secrets.GIT_TOKEN") {
			t.Errorf("sandbox.error %+v, want %s naming secrets.GIT_TOKEN", se, sandbox.ErrSourceFailed)
		}
		_, events, _ := getRaw(t, p, "/v1/sandboxes/"+sb.ID+"/events?limit=1000")
		_, resource, _ := getRaw(t, p, "/v1/sandboxes/"+sb.ID)
		gittest.AssertNoToken(t, "the events page", events, wrong)
		gittest.AssertNoToken(t, "the sandbox", resource, wrong)
		gittest.AssertNoToken(t, "the server log", p.logTail(), wrong)
		if !strings.Contains(p.logTail(), "git source: git failed") {
			t.Errorf("the server log lacks git's failure:\n%s", p.logTail())
		}
	})
}

// agentUID owns the agent's files: AgentID as root, else the server's own.
func agentUID() int {
	if os.Getuid() == 0 {
		return confine.AgentID
	}
	return os.Getuid()
}

// waitSettled follows sandbox id's stream until its status is ready or
// failed, and returns that status.
func waitSettled(t *testing.T, p *serveProc, id string) sandbox.SandboxStatus {
	t.Helper()
	var st sandbox.SandboxStatus
	streamUntil(t, p, id, func(f frame) bool {
		if f.event != string(sandbox.TypeSandboxStatus) {
			return false
		}
		var env struct {
			Data sandbox.SandboxStatus `json:"data"`
		}
		if err := json.Unmarshal(f.data, &env); err != nil {
			t.Fatalf("sandbox.status %s: %v", f.data, err)
		}
		st = env.Data
		return st.Status == sandbox.StatusReady || st.Status == sandbox.StatusFailed
	})
	return st
}

// getRaw is a GET with the server token, its answer as it came.
func getRaw(t *testing.T, p *serveProc, path string) (int, string, http.Header) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.url+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+p.token)
	resp, err := p.hc.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	return resp.StatusCode, string(b), resp.Header
}
