package main

import (
	"bytes"
	"testing"

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
