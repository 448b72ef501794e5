package sparklestest_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sparkles-dev/sparkles/client"
	"github.com/sparkles-dev/sparkles/sandbox"
	"github.com/sparkles-dev/sparkles/sparklestest"
)

// TestHTTPToolOutput: a sandbox created with tool_output has the output of
// the demo agent's command in its log, stripped of its colours and
// redacted of the sandbox's secret, and in its snapshot with its tool; a
// sandbox created without has no tool.output.
func TestHTTPToolOutput(t *testing.T) {
	const secret = "tok-9f8e7d6c5b4a3210"
	for _, on := range []bool{true, false} {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		srv := sparklestest.Start(t)
		sb, err := srv.Client.CreateSandbox(ctx, client.CreateSandboxRequest{
			Secrets: map[string]string{"DEMO_TOKEN": secret}, ToolOutput: on,
		})
		if err != nil {
			t.Fatal(err)
		}
		if got, err := srv.Client.GetSandbox(ctx, sb.ID); err != nil || sb.ToolOutput != on || got.ToolOutput != on {
			t.Fatalf("tool_output: created %v, read %v (%v), want %v", sb.ToolOutput, got.ToolOutput, err, on)
		}
		st := srv.Client.Stream(ctx, sb.ID, client.StreamOptions{Since: client.Since(0)})
		defer st.Close()
		r := &run{t: t, ctx: ctx, srv: srv, sb: sb, stream: st}
		if _, err := srv.Client.StartTurn(ctx, sb.ID, "show the output"); err != nil {
			t.Fatal(err)
		}
		evs := r.until(of(sandbox.TypeTurnCompleted))
		var outs []*sandbox.ToolOutput
		for _, ev := range evs {
			if o, ok := ev.Data.(*sandbox.ToolOutput); ok {
				outs = append(outs, o)
			}
		}
		if !on {
			if len(outs) != 0 {
				t.Fatalf("tool_output false: %d tool.output events, want none", len(outs))
			}
			continue
		}
		if len(outs) == 0 {
			t.Fatalf("tool_output true: no tool.output in %s", kinds(evs))
		}
		last := outs[len(outs)-1]
		for _, o := range outs {
			if strings.Contains(o.Text, secret) || strings.Contains(o.Text, "\x1b") || strings.Contains(o.Text, "\r") {
				t.Fatalf("tool.output text %q shows the secret or escape sequences", o.Text)
			}
		}
		if !strings.Contains(last.Text, "DEMO_TOKEN=[REDACTED]\n") || !strings.HasPrefix(last.Text, "$ env\n") ||
			!strings.HasSuffix(last.Text, "done\n") || last.ExitCode == nil || *last.ExitCode != 0 || last.Truncated {
			t.Fatalf("last tool.output = %q exit %v truncated %v, want the whole env with the secret redacted, exit 0", last.Text, last.ExitCode, last.Truncated)
		}
		// A new connection starts with the snapshot.
		st2 := srv.Client.Stream(ctx, sb.ID, client.StreamOptions{})
		defer st2.Close()
		var snap sandbox.Snapshot
		for {
			m, err := st2.Next(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if m.Kind == client.KindSnapshot {
				snap, _ = st2.Snapshot()
				break
			}
		}
		found := false
		for _, tl := range snap.Tools {
			if tl.ToolCallID == last.ToolCallID {
				found = tl.Output != nil && tl.Output.Text == last.Text && tl.Output.ExitCode != nil
			}
		}
		if !found {
			t.Fatalf("snapshot tools %+v, want tool %s with its last output", snap.Tools, last.ToolCallID)
		}
	}
}
