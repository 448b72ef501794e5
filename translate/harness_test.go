package translate

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sparkles-dev/sparkles/sandbox"
)

// The scripts of these tests are recorded ACP traffic, one step a line:
//
//	start <turn_id> <input text>
//	update <session/update params>
//	perm <session/request_permission params>
//	resolve <approval_id> <decision|-> <option_id|-> <reason|->
//	tick <duration>          advance the clock
//	flush                    call Flush
//	next                     call NextFlush
//	end <stop_reason|->      EndTurn; "end cancel" for a user cancel,
//	                         "end fail <code> <message>" for a failure,
//	                         "end <stop_reason> usage <in> <out> <total>"
//	                         for a prompt answer that reported usage
//	error <code> <message>
//
// Every event becomes one line "<type> <turn_id|-> <data>", and the
// answers of perm, resolve and next lines "=> …".

// testDataDir and testDir are the data directory and the sandbox working
// directory of every scripted translator, laid out as the server lays them.
const (
	testDataDir = "/srv/data"
	testDir     = testDataDir + "/sandboxes/c_1/work"
)

// testSecret is a sandbox secret that must never leave in any form.
const testSecret = "hunter2-supersecret-value"

// forbidden are strings no event may carry: the agent's own ids, session and
// meta values of the recorded traffic, raw field names, the secret.
var forbidden = []string{
	"agent-secret-id", "sess-secret", "meta-canary", "raw-canary",
	"rawInput", "rawOutput", "_meta", "sessionId", "toolCallId", "messageId", "optionId",
	testSecret,
}

type clock struct{ t time.Time }

func (c *clock) Now() time.Time { return c.t }

var epoch = time.Date(2026, 8, 6, 12, 0, 0, 0, time.UTC)

// seqIDs returns an id source that numbers each prefix from 1, so expected
// events can name msg_1, part_2, tool_1.
func seqIDs() func(string) string {
	n := map[string]int{}
	return func(prefix string) string {
		n[prefix]++
		return prefix + strconv.Itoa(n[prefix])
	}
}

func newScripted(c *clock, secrets ...string) *Translator {
	return New(Config{
		SandboxID: "c_1",
		Dir:       testDir,
		DataDir:   testDataDir,
		Secrets:   secrets,
		Now:       c.Now,
		NewID:     seqIDs(),
	})
}

// run plays script on tr and returns the lines it produced. It fails the
// test on a bad script and on any event that breaks the envelope rules.
func run(t testing.TB, tr *Translator, c *clock, script string) []string {
	t.Helper()
	out, _ := play(t, tr, c, script)
	return out
}

// play is run that also returns the events.
func play(t testing.TB, tr *Translator, c *clock, script string) ([]string, []*sandbox.Event) {
	t.Helper()
	var out []string
	var all []*sandbox.Event
	emit := func(evs []*sandbox.Event) {
		all = append(all, evs...)
		for _, ev := range evs {
			checkEvent(t, tr, c, ev)
			data, err := json.Marshal(ev.Data)
			if err != nil {
				t.Fatalf("marshal %s: %v", ev.Type, err)
			}
			turn := ev.TurnID
			if turn == "" {
				turn = "-"
			}
			out = append(out, fmt.Sprintf("%s %s %s", ev.Type, turn, data))
		}
	}
	for _, line := range strings.Split(strings.TrimSpace(script), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		op, rest, _ := strings.Cut(line, " ")
		args := strings.Fields(rest)
		arg := func(i int) string {
			if i >= len(args) || args[i] == "-" {
				return ""
			}
			return args[i]
		}
		switch op {
		case "start":
			id, text, _ := strings.Cut(rest, " ")
			emit(tr.StartTurn(id, sandbox.TextInput(text)))
		case "update":
			emit(tr.Update(json.RawMessage(rest)))
		case "perm":
			p, evs := tr.RequestPermission(json.RawMessage(rest))
			emit(evs)
			out = append(out, "=> "+formatPending(p))
		case "resolve":
			o, evs, err := tr.ResolveApproval(arg(0), arg(1), arg(2), arg(3))
			emit(evs)
			switch {
			case err != nil:
				out = append(out, "=> error "+sandbox.ErrorType(err))
			case o.Cancelled:
				out = append(out, "=> cancelled")
			default:
				out = append(out, "=> selected "+o.OptionID)
			}
		case "tick":
			d, err := time.ParseDuration(rest)
			if err != nil {
				t.Fatalf("script: %q: %v", line, err)
			}
			c.t = c.t.Add(d)
		case "flush":
			emit(tr.Flush())
		case "next":
			at, ok := tr.NextFlush()
			if !ok {
				out = append(out, "=> next none")
			} else {
				out = append(out, "=> next +"+at.Sub(c.t).String())
			}
		case "end":
			var r TurnResult
			switch arg(0) {
			case "cancel":
				r.Canceled = true
			case "fail":
				_, msg, _ := strings.Cut(strings.TrimPrefix(rest, "fail "), " ")
				r.Err = &sandbox.ErrorInfo{Code: arg(1), Message: msg}
			default:
				r.StopReason = arg(0)
				if arg(1) == "usage" {
					var n [3]int64
					for i := range n {
						v, err := strconv.ParseInt(arg(2+i), 10, 64)
						if err != nil {
							t.Fatalf("script: %q: %v", line, err)
						}
						n[i] = v
					}
					r.Usage = &sandbox.Usage{InputTokens: n[0], OutputTokens: n[1], TotalTokens: n[2]}
				}
			}
			emit(tr.EndTurn(r))
		case "error":
			code, msg, _ := strings.Cut(rest, " ")
			emit(tr.Error(code, msg))
		default:
			t.Fatalf("script: unknown step %q", line)
		}
	}
	return out, all
}

func formatPending(p Pending) string {
	if p.ApprovalID == "" {
		return "no approval"
	}
	var opts []string
	for ours, theirs := range p.AgentOptions {
		opts = append(opts, ours+"="+theirs)
	}
	slices.Sort(opts)
	return fmt.Sprintf("pending %s %s expires +%s", p.ApprovalID, strings.Join(opts, ","), p.ExpiresAt.Sub(epoch))
}

// checkEvent checks what must hold of every event whatever its content.
func checkEvent(t testing.TB, tr *Translator, c *clock, ev *sandbox.Event) {
	t.Helper()
	if got, want := ev.TS, c.t; !got.Equal(want) {
		t.Fatalf("%s ts = %v, want %v", ev.Type, got, want)
	}
	if got, want := ev.SandboxID, "c_1"; got != want {
		t.Fatalf("%s sandbox_id = %q, want %q", ev.Type, got, want)
	}
	if ev.Type != sandbox.TypeSandboxError && ev.TurnID == "" {
		t.Fatalf("%s outside a turn", ev.Type)
	}
	b, err := json.Marshal(ev)
	if err != nil {
		t.Fatalf("marshal %s: %v", ev.Type, err)
	}
	for _, f := range forbidden {
		if strings.Contains(string(b), f) {
			t.Fatalf("%s carries %q: %s", ev.Type, f, b)
		}
	}
	var back sandbox.Event
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatalf("decode %s: %v", ev.Type, err)
	}
	if got, want := fmt.Sprintf("%T", back.Data), fmt.Sprintf("%T", ev.Data); got != want {
		t.Fatalf("%s data is %s, want %s", ev.Type, want, got)
	}
}

// diffLines fails with the first difference between two outputs.
func diffLines(t *testing.T, got, want []string) {
	t.Helper()
	for i := 0; i < max(len(got), len(want)); i++ {
		var g, w string
		if i < len(got) {
			g = got[i]
		}
		if i < len(want) {
			w = want[i]
		}
		if g != w {
			t.Fatalf("line %d:\n got: %s\nwant: %s\n\nall got:\n%s", i, g, w, strings.Join(got, "\n"))
		}
	}
}

// lines splits an expected output written one line each.
func lines(s string) []string {
	var out []string
	for _, l := range strings.Split(strings.TrimSpace(s), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	return out
}
