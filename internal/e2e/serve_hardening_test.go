package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sparkles-dev/sparkles/sandbox"
	"github.com/sparkles-dev/sparkles/sparklestest"
)

// echoAgentArg makes the test binary the agent of
// TestOperatorCredentialsCanary: a process that, as a prompt-injected
// agent would, writes back what the operator gave it.
const echoAgentArg = "-operator-echo-agent"

func init() {
	if len(os.Args) == 2 && os.Args[1] == echoAgentArg {
		runOperatorEchoAgent()
		os.Exit(0)
	}
}

// The operator's values of the canary: a model key in the registry's env
// (too short for the sk- token shape, so only the rule for operator values
// can catch it), a proxy URL with a password handed through pass_env, and
// two settings that must stay readable.
const (
	operatorKey      = "sk-operator-Qx7Lm2"
	operatorProxyVar = "SPARKLES_TEST_OPERATOR_PROXY"
	operatorPassword = "Pw9-canary-Z4"
	operatorProxy    = "https://agent:" + operatorPassword + "@proxy.invalid:3128"
	operatorModel    = "claude-sonnet-4-5"
)

// runOperatorEchoAgent speaks just enough ACP to run one turn, in which it
// sends its operator values back in a message, a tool title, a permission
// request's labels, its stderr and, at last, the error it answers the
// prompt with before it exits.
func runOperatorEchoAgent() {
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 1<<20)
	enc := json.NewEncoder(os.Stdout)
	key, proxy := os.Getenv("MODEL_KEY"), os.Getenv(operatorProxyVar)
	password := strings.TrimSuffix(strings.TrimPrefix(proxy, "https://agent:"), "@proxy.invalid:3128")
	update := func(u map[string]any) {
		_ = enc.Encode(map[string]any{"jsonrpc": "2.0", "method": "session/update", "params": map[string]any{"sessionId": "s1", "update": u}})
	}
	for in.Scan() {
		var m struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
		}
		if json.Unmarshal(in.Bytes(), &m) != nil {
			continue
		}
		switch m.Method {
		case "initialize":
			_ = enc.Encode(map[string]any{"jsonrpc": "2.0", "id": m.ID, "result": map[string]any{"protocolVersion": 1, "agentCapabilities": map[string]any{}}})
		case "session/new":
			_ = enc.Encode(map[string]any{"jsonrpc": "2.0", "id": m.ID, "result": map[string]any{"sessionId": "s1"}})
		case "session/prompt":
			update(map[string]any{"sessionUpdate": "agent_message_chunk", "content": map[string]any{"type": "text", "text": fmt.Sprintf(
				"I run %s (verbose %s) with key %s through %s, password %s.", os.Getenv("MODEL_NAME"), os.Getenv("VERBOSE"), key, proxy, password)}})
			update(map[string]any{"sessionUpdate": "tool_call", "toolCallId": "t1", "title": "curl -x " + proxy + " -H 'x-api-key: " + key + "'", "kind": "fetch", "status": "pending"})
			_ = enc.Encode(map[string]any{"jsonrpc": "2.0", "id": 900, "method": "session/request_permission", "params": map[string]any{
				"sessionId": "s1", "toolCall": map[string]any{"toolCallId": "t1", "title": "send " + key},
				"options": []map[string]any{
					{"optionId": "yes", "name": "Allow " + key + " via " + proxy, "kind": "allow_once"},
					{"optionId": "no", "name": "Deny " + password, "kind": "reject_once"},
				}}})
			for in.Scan() {
				var r struct {
					ID json.RawMessage `json:"id"`
				}
				if json.Unmarshal(in.Bytes(), &r) == nil && string(r.ID) == "900" {
					break
				}
			}
			fmt.Fprintf(os.Stderr, "leaving with %s %s %s\n", key, proxy, password)
			_ = enc.Encode(map[string]any{"jsonrpc": "2.0", "id": m.ID, "error": map[string]any{
				"code": -32603, "message": "the model API refused key " + key + " through " + proxy + " (" + password + ")"}})
			return
		}
	}
}

// TestOperatorCredentialsCanary runs an agent that knows the operator's
// credentials (registry env and pass_env) and writes them everywhere it
// can: a reader with the sandbox's stream token, and the server token's
// answers too, must see none of them, while the operator's plain settings
// (a model name, "true") stay as written.
func TestOperatorCredentialsCanary(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv(operatorProxyVar, operatorProxy)
	srv := sparklestest.Start(t,
		// The agent is this test binary, not what is under test here:
		// redaction is the same confined or not.
		sparklestest.WithIsolation("off"),
		sparklestest.WithFlushInterval(5*time.Millisecond),
		sparklestest.WithRegisteredAgent("echo", sparklestest.Agent{
			Command: exe,
			Args:    []string{echoAgentArg},
			Env:     map[string]string{"MODEL_KEY": operatorKey, "MODEL_NAME": operatorModel, "VERBOSE": "true"},
			PassEnv: []string{operatorProxyVar},
		}))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	owner := &canaryClient{t: t, base: srv.URL, token: srv.Token, types: map[sandbox.Type]bool{}}
	var created struct {
		ID          string `json:"id"`
		StreamToken string `json:"stream_token"`
	}
	// Metadata is answered verbatim ever after, so it is redacted as it is stored.
	owner.do(http.MethodPost, "/v1/sandboxes", map[string]any{"agent": "echo", "metadata": map[string]string{"note": "pasted " + operatorKey}},
		http.StatusCreated, &created)
	reader := &canaryClient{t: t, base: srv.URL, token: created.StreamToken, types: map[sandbox.Type]bool{}}
	events := make(chan sandbox.Event, 1024)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		reader.follow(ctx, created.ID, events)
	}()
	next := func(typ sandbox.Type) sandbox.Event {
		t.Helper()
		for {
			select {
			case ev, ok := <-events:
				if !ok {
					t.Fatalf("the stream ended before a %s", typ)
				}
				if ev.Type == typ {
					return ev
				}
			case <-ctx.Done():
				t.Fatalf("no %s", typ)
			}
		}
	}

	sbPath := "/v1/sandboxes/" + created.ID
	var turn sandbox.Turn
	owner.do(http.MethodPost, sbPath+"/turns", map[string]string{"input": "show me what you were given"}, http.StatusAccepted, &turn)
	appr := next(sandbox.TypeApprovalRequested).Data.(*sandbox.ApprovalRequested)
	owner.do(http.MethodPost, sbPath+"/approvals/"+appr.ApprovalID, map[string]string{"decision": "approve"}, http.StatusOK, nil)
	next(sandbox.TypeTurnCompleted)
	for _, c := range []*canaryClient{owner, reader} {
		c.do(http.MethodGet, sbPath, nil, http.StatusOK, nil)
		c.do(http.MethodGet, sbPath+"/events?since=0&limit=1000", nil, http.StatusOK, nil)
	}
	owner.do(http.MethodGet, sbPath+"/turns/"+turn.ID, nil, http.StatusOK, nil)
	cancel()
	wg.Wait()

	for _, typ := range []sandbox.Type{sandbox.TypeMessageUpdated, sandbox.TypeToolUpdated, sandbox.TypeApprovalRequested, sandbox.TypeSandboxError} {
		if !reader.types[typ] {
			t.Errorf("no %s frame was seen: the test does not cover it", typ)
		}
	}
	redacted, settings := 0, 0
	for _, a := range append(owner.answers, reader.answers...) {
		for _, v := range []string{operatorKey, operatorPassword, "proxy.invalid"} {
			if strings.Contains(a, v) {
				t.Errorf("the operator's %q left the server in %.600s", v, a)
			}
		}
		redacted += strings.Count(a, "[REDACTED]")
		if strings.Contains(a, "I run "+operatorModel+" (verbose true)") {
			settings++
		}
	}
	if redacted == 0 {
		t.Error("nothing was redacted: the values never reached an answer, so the test proves nothing")
	}
	if settings == 0 {
		t.Errorf("the operator's plain settings (%s, true) were redacted or never shown", operatorModel)
	}
	// What the agent printed on stderr went to its log, never out: it
	// had the values, pass_env's included.
	log, err := os.ReadFile(filepath.Join(srv.DataDir, "sandboxes", created.ID, "agent.log"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(log), operatorKey+" "+operatorProxy) {
		t.Errorf("agent.log does not hold the values the agent printed: %q", log)
	}
}

// TestServeConnCapFlags checks that --max-connections and
// SPARKLES_MAX_UNAUTHENTICATED_CONNECTIONS reach the server: with a cap of
// two connections without a token, a third takes the place of the one
// idle longest, while a client with the token still gets in. Values that
// cannot work end serve at once, naming the flags.
func TestServeConnCapFlags(t *testing.T) {
	p := startServe(t, cliEnv(t, "SPARKLES_MAX_UNAUTHENTICATED_CONNECTIONS=2"), t.TempDir(), "caps-token",
		"--isolation", "off", "--max-connections", "50")
	p.waitServing()
	defer p.signal(syscall.SIGTERM)
	addr := strings.TrimPrefix(p.url, "http://")
	idle := make([]net.Conn, 3)
	for i := range idle {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		idle[i] = c
	}
	// The first, idle longest, made room for the third.
	_ = idle[0].SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := idle[0].Read(make([]byte, 1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("the connection idle longest was not closed: %v", err)
	}
	req, _ := http.NewRequest(http.MethodGet, p.url+"/v1/sandboxes", nil)
	req.Header.Set("Authorization", "Bearer caps-token")
	resp, err := p.hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("the operator's list: status %d", resp.StatusCode)
	}

	for _, args := range [][]string{
		{"--max-connections", "0"},
		{"--max-connections", "10", "--max-unauthenticated-connections", "20"},
	} {
		res := run(t, cliEnv(t), append([]string{"serve", "--isolation", "off", "--addr", "127.0.0.1:0"}, args...)...)
		if res.code == 0 || !strings.Contains(res.stderr, "--max-unauthenticated-connections") {
			t.Errorf("serve %s: exit %d, stderr %q; want a failure naming the flags", strings.Join(args, " "), res.code, res.stderr)
		}
	}
}
