//go:build linux

package sparklestest_test

import (
	"bufio"
	"context"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sparkles-dev/sparkles/client"
	"github.com/sparkles-dev/sparkles/internal/agent"
	"github.com/sparkles-dev/sparkles/internal/datadir"
	"github.com/sparkles-dev/sparkles/internal/loopback"
	"github.com/sparkles-dev/sparkles/sandbox"
	"github.com/sparkles-dev/sparkles/sparklestest"
)

// envDial makes the test binary an agent that first dials the address
// named, writes the line it read there (or the error) to dial.txt in its
// working directory, and then runs the demo agent.
const envDial = "SPARKLESTEST_DIAL"

func init() {
	addr := os.Getenv(envDial)
	if addr == "" {
		return
	}
	got := "error: "
	if c, err := net.DialTimeout("tcp", addr, 5*time.Second); err != nil {
		got += err.Error()
	} else {
		c.SetDeadline(time.Now().Add(5 * time.Second))
		line, err := bufio.NewReader(c).ReadString('\n')
		got = strings.TrimSpace(line)
		if err != nil {
			got = "error: " + err.Error()
		}
		c.Close()
	}
	os.WriteFile("dial.txt", []byte(got), 0o600)
	if err := agent.RunDemo(context.Background(), os.Stdin, os.Stdout, os.Environ()); err != nil {
		os.Exit(1)
	}
	os.Exit(0)
}

// TestWithAgentHostPort: a confined agent reaches a port of the test's
// loopback that WithAgentHostPort or its entry's HostPorts names, and no
// other.
func TestWithAgentHostPort(t *testing.T) {
	ctx := testContext(t)
	model, entry, other := loopback.Greeter(t, "model"), loopback.Greeter(t, "entry"), loopback.Greeter(t, "other")
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dialer := func(port int, own ...int) sparklestest.Agent {
		return sparklestest.Agent{Command: exe, Env: map[string]string{envDial: "127.0.0.1:" + strconv.Itoa(port)}, HostPorts: own}
	}
	srv := sparklestest.Start(t,
		sparklestest.WithAgentHostPort(model),
		sparklestest.WithRegisteredAgent("model", dialer(model)),
		sparklestest.WithRegisteredAgent("entry", dialer(entry, entry)),
		sparklestest.WithRegisteredAgent("other", dialer(other)),
	)
	for name, want := range map[string]string{"model": "model", "entry": "entry", "other": "error"} {
		sb, err := srv.Client.CreateSandbox(ctx, client.CreateSandboxRequest{Agent: name})
		if err != nil {
			t.Fatal(err)
		}
		if evs := runTurn(t, ctx, srv.Client, sb.ID, "hello"); turnStatus(evs) != sandbox.TurnSucceeded {
			t.Fatalf("%s: turn: %s", name, kinds(evs))
		}
		b, err := os.ReadFile(filepath.Join(datadir.Dir(srv.DataDir).Sandbox(sb.ID).Work(), "dial.txt"))
		if got := string(b); err != nil || !strings.HasPrefix(got, want) {
			t.Errorf("agent %s reached %q (%v), want %q", name, got, err, want)
		}
	}
}
