package cli

import (
	"bytes"
	"io"
	"strings"
	"testing"

	"github.com/sparkles-dev/sparkles/client"
	"github.com/sparkles-dev/sparkles/internal/vtscreen"
	"github.com/sparkles-dev/sparkles/sandbox"
)

func upd(part, kind, text string) *sandbox.MessageUpdated {
	return &sandbox.MessageUpdated{MessageID: "msg_1", PartID: part, Kind: kind, Text: text}
}

func TestRendererPipe(t *testing.T) {
	var out, errw bytes.Buffer
	r := newRenderer(&out, &errw, false)
	r.part(upd("part_1", sandbox.PartReasoning, "Think"))
	r.part(upd("part_1", sandbox.PartReasoning, "Thinking."))
	r.part(upd("part_2", sandbox.PartText, "Hel"))
	r.part(upd("part_2", sandbox.PartText, "Hello [REDACTED]"))
	r.tool(&sandbox.ToolUpdated{ToolCallID: "tool_1", Title: "Read a.go", Kind: "read", Status: "pending"})
	r.tool(&sandbox.ToolUpdated{ToolCallID: "tool_1", Title: "Read a.go", Kind: "read", Status: "pending"})
	r.tool(&sandbox.ToolUpdated{ToolCallID: "tool_1", Title: "Read a.go", Kind: "read", Status: "completed"})
	r.part(upd("part_3", sandbox.PartText, "Bye\x1b]0;pwned\x07."))
	r.completed(&sandbox.MessageCompleted{MessageID: "msg_1", Parts: []sandbox.Part{
		{PartID: "part_1", Kind: sandbox.PartReasoning, Text: "Thinking."},
		{PartID: "part_2", Kind: sandbox.PartText, Text: "Hello [REDACTED]"},
		{PartID: "part_3", Kind: sandbox.PartText, Text: "Bye\x1b]0;pwned\x07."},
		{PartID: "part_4", Kind: sandbox.PartText, Text: "Never streamed."},
	}})
	r.finish()
	if got, want := out.String(), "Hello [REDACTED]\nBye]0;pwned.\nNever streamed.\n"; got != want {
		t.Fatalf("stdout = %q, want %q", got, want)
	}
	if got, want := errw.String(), "thinking: Thinking.\n[read] Read a.go: pending\n[read] Read a.go: completed\n"; got != want {
		t.Fatalf("stderr = %q, want %q", got, want)
	}
}

func TestRendererTerminal(t *testing.T) {
	t.Run("Grows", func(t *testing.T) {
		var out bytes.Buffer
		r := newRenderer(&out, &out, false)
		r.tty, r.fd = true, -1
		r.part(upd("part_1", sandbox.PartReasoning, "Hm"))
		r.part(upd("part_1", sandbox.PartReasoning, "Hmm."))
		r.part(upd("part_2", sandbox.PartText, "Hel"))
		r.part(upd("part_2", sandbox.PartText, "Hello"))
		r.tool(&sandbox.ToolUpdated{ToolCallID: "tool_1", Title: "Read", Kind: "read", Status: "running"})
		r.completed(&sandbox.MessageCompleted{Parts: []sandbox.Part{
			{PartID: "part_1", Kind: sandbox.PartReasoning, Text: "Hmm."},
			{PartID: "part_2", Kind: sandbox.PartText, Text: "Hello"},
		}})
		r.finish()
		want := faint + "Hm" + reset + faint + "m." + reset + "\nHel" + "lo" + "\n[read] Read: running\n"
		if got := out.String(); got != want {
			t.Fatalf("output = %q, want %q", got, want)
		}
	})
	t.Run("Revised", func(t *testing.T) {
		// Without a size to redraw by, the revised text goes below: never
		// a mix of the old text and the new.
		var out bytes.Buffer
		r := newRenderer(&out, &out, true)
		r.tty, r.fd = true, -1
		r.part(upd("part_1", sandbox.PartReasoning, "hidden"))
		r.part(upd("part_2", sandbox.PartText, "key sk-12"))
		r.part(upd("part_2", sandbox.PartText, "key [REDACTED] ok"))
		r.finish()
		if got, want := out.String(), "key sk-12\nkey [REDACTED] ok\n"; got != want {
			t.Fatalf("output = %q, want %q", got, want)
		}
	})
}

func TestScreenRows(t *testing.T) {
	for _, tt := range []struct {
		s    string
		cols int
		want int
	}{
		{"", 80, 1},
		{"abc", 80, 1},
		{"abc\n", 80, 2},
		{"a\nb\nc", 80, 3},
		{string(bytes.Repeat([]byte("x"), 80)), 80, 1},
		{string(bytes.Repeat([]byte("x"), 81)), 80, 2},
		{"héllo wörld", 5, 3},
	} {
		if got := screenRows(tt.s, tt.cols); got != tt.want {
			t.Errorf("screenRows(%q, %d) = %d, want %d", tt.s, tt.cols, got, tt.want)
		}
	}
}

// askApproval is an approval of a write offering options of the given
// kinds, in that order, numbered opt_1… and labelled by kind.
func askApproval(kinds ...string) *sandbox.ApprovalRequested {
	a := &sandbox.ApprovalRequested{ApprovalID: "appr_1", Title: "Write notes.txt", Kind: "edit"}
	labels := map[string]string{
		sandbox.OptionAllowOnce: "Allow", sandbox.OptionAllowAlways: "Always allow writes",
		sandbox.OptionRejectOnce: "Reject", sandbox.OptionRejectAlways: "Never allow writes",
	}
	for i, k := range kinds {
		a.Options = append(a.Options, sandbox.Option{OptionID: "opt_" + string(rune('1'+i)), Kind: k, Label: labels[k]})
	}
	return a
}

func TestQuestion(t *testing.T) {
	const (
		once    = sandbox.OptionAllowOnce
		always  = sandbox.OptionAllowAlways
		reject  = sandbox.OptionRejectOnce
		never   = sandbox.OptionRejectAlways
		subject = "Allow [edit] Write notes.txt? "
	)
	for _, tt := range []struct {
		name string
		a    *sandbox.ApprovalRequested
		want string
	}{
		{"OnceOnly", askApproval(once, reject), subject + "[y/N] "},
		{"AlwaysFirst", askApproval(always, once, reject), subject + "[y]es once / [a]lways (Always allow writes) / [N]o "},
		{"BothAlways", askApproval(never, once, always, reject), subject + "[y]es once / [a]lways (Always allow writes) / [N]o "},
		{"RejectAlways", askApproval(once, never), subject + "[y]es once / [a]lways deny (Never allow writes) / [N]o "},
		// No once to grant: a plain approve would take the always-option.
		{"NoAllowOnce", askApproval(always, reject), subject + "[a]lways (Always allow writes) / [N]o "},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := question(tt.a); got != tt.want {
				t.Fatalf("question = %q, want %q", got, tt.want)
			}
		})
	}
	t.Run("Sanitized", func(t *testing.T) {
		a := askApproval(once, always)
		a.Title = "Write \x1b]0;pwned\x07x"
		a.Options[1].Label = "Always\x1b[2J allow"
		want := "Allow [edit] Write ]0;pwnedx? [y]es once / [a]lways (Always[2J allow) / [N]o "
		if got := question(a); got != want {
			t.Fatalf("question = %q, want %q", got, want)
		}
	})
}

func TestAnswerDecision(t *testing.T) {
	const (
		once   = sandbox.OptionAllowOnce
		always = sandbox.OptionAllowAlways
		reject = sandbox.OptionRejectOnce
		never  = sandbox.OptionRejectAlways
	)
	byOption := func(id string) client.Decision { return client.Decision{OptionID: id} }
	for _, tt := range []struct {
		name    string
		a       *sandbox.ApprovalRequested
		line    string
		want    client.Decision
		outcome string
	}{
		{"YesOnce", askApproval(always, once, reject), "y\n", client.Approve, "approved once"},
		{"YesWord", askApproval(always, once, reject), " Yes \n", client.Approve, "approved once"},
		{"Always", askApproval(always, once, reject), "a\n", byOption("opt_1"), "always allowed (Always allow writes)"},
		{"AlwaysWord", askApproval(once, reject, always), "ALWAYS\n", byOption("opt_3"), "always allowed (Always allow writes)"},
		{"AlwaysPrefersAllow", askApproval(never, once, always), "a\n", byOption("opt_3"), "always allowed (Always allow writes)"},
		{"AlwaysDeny", askApproval(once, never), "a\n", byOption("opt_2"), "always denied (Never allow writes)"},
		{"Enter", askApproval(always, once, reject), "\n", client.Deny, "denied"},
		{"Other", askApproval(always, once, reject), "sure\n", client.Deny, "denied"},
		{"NoQuestionOfAlways", askApproval(once, reject), "a\n", client.Deny, "denied"},
		{"PlainYes", askApproval(once, reject), "y\n", client.Approve, "approved"},
		// "yes once" was not offered: a plain approve would grant always.
		{"YesWithoutOnce", askApproval(always, reject), "y\n", client.Deny, "denied"},
		{"EndOfInput", askApproval(always, once, reject), "", client.Deny, "denied"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, outcome := answerDecision(tt.a, tt.line)
			if got != tt.want || outcome != tt.outcome {
				t.Fatalf("answerDecision(%q) = %+v, %q; want %+v, %q", tt.line, got, outcome, tt.want, tt.outcome)
			}
		})
	}
}

// liveRenderer is a renderer on a terminal that moves the cursor, as
// wide as a narrow window, drawing on vt.
func liveRenderer(vt *vtscreen.Screen) *renderer {
	r := newRenderer(vt, vt, false)
	r.tty, r.fancy, r.fd, r.cols = true, true, -1, vt.Cols()
	return r
}

func wantScreen(t *testing.T, vt *vtscreen.Screen, want string) {
	t.Helper()
	if got := vt.String(); got != want {
		t.Fatalf("screen:\n%s\nwant:\n%s", got, want)
	}
}

func TestRendererLive(t *testing.T) {
	tool := func(id, title, status string) *sandbox.ToolUpdated {
		return &sandbox.ToolUpdated{ToolCallID: id, Title: title, Kind: "edit", Status: status}
	}
	vt := vtscreen.New(60)
	r := liveRenderer(vt)
	r.setWaiting("waiting for the agent…")
	wantScreen(t, vt, "⠋ waiting for the agent…")
	r.part(upd("part_1", sandbox.PartReasoning, "Think"))
	wantScreen(t, vt, "Think")
	r.tool(tool("tool_1", "Read a.go", sandbox.ToolPending))
	wantScreen(t, vt, "Think\n⠋ Read a.go · pending")
	r.tick()
	r.tool(tool("tool_1", "Read a.go", sandbox.ToolRunning))
	r.tool(tool("tool_2", "Write b.go", sandbox.ToolPending))
	wantScreen(t, vt, "Think\n⠙ Read a.go · running\n⠙ Write b.go · pending")
	r.tool(tool("tool_1", "Read a.go", sandbox.ToolCompleted))
	wantScreen(t, vt, "Think\n✓ Read a.go\n⠙ Write b.go · pending")

	// A question hides the area until it is answered.
	r.ask("Allow [edit] Write b.go? [y/N] ")
	wantScreen(t, vt, "Think\n✓ Read a.go\nAllow [edit] Write b.go? [y/N]")
	r.tick()
	vt.Write([]byte("y\r\n")) // the terminal echoes what is typed
	r.answered()
	wantScreen(t, vt, "Think\n✓ Read a.go\nAllow [edit] Write b.go? [y/N] y\n⠙ Write b.go · pending")

	// Canceled, the tool the agent then reports failed shows as canceled, once.
	r.canceling = true
	r.tool(tool("tool_2", "Write b.go", sandbox.ToolFailed))
	r.tool(tool("tool_2", "Write b.go", sandbox.ToolFailed))
	r.finish()
	r.turnSummary(&sandbox.TurnCompleted{Status: sandbox.TurnCanceled, DurationMS: 1234, Usage: &sandbox.Usage{InputTokens: 1, OutputTokens: 5}}, 0, `sparkles prompt --sandbox c_1 "…"`)
	wantScreen(t, vt, "Think\n✓ Read a.go\nAllow [edit] Write b.go? [y/N] y\n⊘ Write b.go · canceled\n"+
		"⊘ canceled after 1.2s · 1 token in, 5 out\n  continue: sparkles prompt --sandbox c_1 \"…\"")
	if vt.Colored() {
		t.Fatal("colours on a terminal that takes none")
	}

	t.Run("LongTitle", func(t *testing.T) {
		// A live line never wraps, so that it can be redrawn in place.
		vt := vtscreen.New(30)
		r := liveRenderer(vt)
		r.tool(tool("tool_1", "Read a file with a very long name indeed.go", sandbox.ToolRunning))
		r.tick()
		wantScreen(t, vt, "⠙ Read a file with… · running")
	})
	t.Run("Color", func(t *testing.T) {
		vt := vtscreen.New(60)
		r := liveRenderer(vt)
		r.color = true
		r.tool(tool("tool_1", "Read a.go", sandbox.ToolCompleted))
		wantScreen(t, vt, "✓ Read a.go")
		if !vt.Colored() {
			t.Fatal("no colour on a terminal that takes them")
		}
	})
	t.Run("Resume", func(t *testing.T) {
		// A notice between two updates of a part: the text goes on below
		// it, and the final message repeats nothing.
		vt := vtscreen.New(60)
		r := liveRenderer(vt)
		r.part(upd("part_1", sandbox.PartText, "Step 1."))
		r.notice("sparkles: canceling the turn")
		r.part(upd("part_1", sandbox.PartText, "Step 1. Step 2."))
		r.completed(&sandbox.MessageCompleted{Parts: []sandbox.Part{{PartID: "part_1", Kind: sandbox.PartText, Text: "Step 1. Step 2. Step 3."}}})
		r.finish()
		wantScreen(t, vt, "Step 1.\nsparkles: canceling the turn\n Step 2. Step 3.")
	})
}

func TestRendererPipeCanceled(t *testing.T) {
	// On a pipe too, a tool whose approval the cancel settled is canceled,
	// not canceled and then failed.
	var out, errw bytes.Buffer
	r := newRenderer(&out, &errw, false)
	a := &sandbox.ApprovalRequested{ApprovalID: "appr_1", ToolCallID: "tool_1", Title: "Write b.go", Kind: "edit"}
	r.tool(&sandbox.ToolUpdated{ToolCallID: "tool_1", Title: "Write b.go", Kind: "edit", Status: sandbox.ToolPending})
	r.toolCanceled(a)
	r.tool(&sandbox.ToolUpdated{ToolCallID: "tool_1", Title: "Write b.go", Kind: "edit", Status: sandbox.ToolFailed})
	if got, want := errw.String(), "[edit] Write b.go: pending\n[edit] Write b.go: canceled\n"; got != want {
		t.Fatalf("stderr = %q, want %q", got, want)
	}
}

// TestRendererDenied: a tool whose approval was denied did not run: it
// ends denied, in amber, not failed, and the turn that succeeded all the
// same says so in the console's words, in amber rather than green.
func TestRendererDenied(t *testing.T) {
	a := &sandbox.ApprovalRequested{ApprovalID: "appr_1", ToolCallID: "tool_1", Title: "Write b.go", Kind: "edit"}
	tool := func(status string) *sandbox.ToolUpdated {
		return &sandbox.ToolUpdated{ToolCallID: "tool_1", Title: "Write b.go", Kind: "edit", Status: status}
	}
	t.Run("Terminal", func(t *testing.T) {
		vt := vtscreen.New(60)
		var raw bytes.Buffer
		w := io.MultiWriter(vt, &raw)
		r := newRenderer(w, w, false)
		r.tty, r.fancy, r.color, r.fd, r.cols = true, true, true, -1, vt.Cols()
		r.tool(tool(sandbox.ToolPending))
		r.deny(a)
		r.tool(tool(sandbox.ToolFailed))
		r.tool(&sandbox.ToolUpdated{ToolCallID: "tool_2", Title: "Run make", Kind: "execute", Status: sandbox.ToolFailed})
		r.finish()
		r.turnSummary(&sandbox.TurnCompleted{Status: sandbox.TurnSucceeded, DurationMS: 2100}, 1, "")
		wantScreen(t, vt, "⊘ Write b.go · denied\n✗ Run make · failed\n✓ succeeded with a denial in 2.1s")
		amber := "\x1b[" + sgrYellow + "m"
		for _, want := range []string{amber + "⊘" + reset + " Write b.go", amber + "✓" + reset + " \x1b[" + sgrBold + "msucceeded with a denial"} {
			if !strings.Contains(raw.String(), want) {
				t.Errorf("no %q in %q", want, raw.String())
			}
		}
	})
	t.Run("Pipe", func(t *testing.T) {
		// Through the events as sparkles prompt reads them: a denial made
		// elsewhere, the agent's failed tool, the turn's success.
		var out, errw bytes.Buffer
		p := &promptRun{r: newRenderer(&out, &errw, false), errw: &errw, approvals: map[string]*sandbox.ApprovalRequested{a.ApprovalID: a}}
		var done bool
		var err error
		for _, d := range []any{
			tool(sandbox.ToolPending),
			&sandbox.ApprovalResolved{ApprovalID: a.ApprovalID, Decision: sandbox.DecisionDenied, Reason: sandbox.ReasonUser},
			tool(sandbox.ToolFailed),
			&sandbox.TurnCompleted{Status: sandbox.TurnSucceeded, StopReason: sandbox.StopEndTurn},
		} {
			done, err = p.handle(client.Message{Kind: client.KindEvent, Event: sandbox.Event{Data: d}})
		}
		if !done || err != exitDenied {
			t.Fatalf("handle = %v, %v; want done, exit %v", done, err, exitDenied)
		}
		want := "[edit] Write b.go: pending\napproval appr_1: denied (user)\n[edit] Write b.go: denied\nsparkles: turn succeeded with a denial\n"
		if got := errw.String(); got != want {
			t.Fatalf("stderr = %q, want %q", got, want)
		}
	})
	if got, want := denialWords(2), "succeeded with 2 denials"; got != want {
		t.Fatalf("denialWords(2) = %q, want %q", got, want)
	}
}
