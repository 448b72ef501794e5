package translate

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sparkles-dev/sparkles/sandbox"
)

// canary is a sandbox secret no event may ever carry.
const canary = "zq-canary-7f3a9"

// fuzzSeeds are inputs of FuzzTranslate: lines of session/update params,
// with a first byte that picks another step:
//
//	p<params>   session/request_permission
//	r<d>        resolve the oldest pending approval, decision by d
//	t<n>        advance the clock n ms and Flush
//	e<k>        end the turn, kind by k, and start another
//	x<message>  sandbox.error
var fuzzSeeds = []string{
	`{"sessionId":"sess-secret-1","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"my zq-can"},"messageId":"agent-secret-id-m1"}}
t2
{"sessionId":"sess-secret-1","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"ary-7f3a9 is it"},"messageId":"agent-secret-id-m1"}}
{"sessionId":"sess-secret-1","update":{"sessionUpdate":"agent_thought_chunk","content":{"type":"text","text":"hmm zq-canary-7f3a9"},"messageId":"agent-secret-id-m2"}}
e0`,
	`{"sessionId":"sess-secret-1","update":{"sessionUpdate":"tool_call","toolCallId":"agent-secret-id-t1","title":"cat zq-canary-7f3a9","kind":"read","status":"pending","locations":[{"path":"/srv/data/sandboxes/c_1/work/zq-canary-7f3a9","line":1},{"path":"/etc/agent-secret-id"}],"rawInput":{"x":"raw-canary"},"_meta":{"m":"meta-canary"}}}
{"sessionId":"sess-secret-1","update":{"sessionUpdate":"tool_call_update","toolCallId":"agent-secret-id-t1","status":"in_progress","content":[{"type":"terminal","terminalId":"agent-secret-id-term"}],"rawOutput":"raw-canary"}}
p{"sessionId":"sess-secret-1","toolCall":{"toolCallId":"agent-secret-id-t2","title":"rm -rf zq-canary-7f3a9","kind":"delete","rawInput":{"cmd":"raw-canary"}},"options":[{"optionId":"agent-secret-id-o1","name":"Allow zq-canary-7f3a9","kind":"allow_once"},{"optionId":"agent-secret-id-o2","name":"No","kind":"reject_once"}]}
r0
p{"sessionId":"sess-secret-1","toolCall":{"toolCallId":"agent-secret-id-t1"},"options":[{"optionId":"agent-secret-id-o3","name":"Yes","kind":"allow_always"}]}
e1`,
	`{"sessionId":"sess-secret-1","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"I wrote /srv/data/sandb"}}}
t2
{"sessionId":"sess-secret-1","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"oxes/c_1/work/notes.txt and /srv/data/tok"}}}
t9
{"sessionId":"sess-secret-1","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"en."}}}
{"sessionId":"sess-secret-1","update":{"sessionUpdate":"tool_call","toolCallId":"agent-secret-id-t1","title":"cat /srv/data/sandboxes/c_2/work/x","kind":"read","locations":[{"path":"/srv/data/sandboxes/c_1/work/a.go"},{"path":"/srv/data/token"}]}}
p{"sessionId":"sess-secret-1","toolCall":{"toolCallId":"agent-secret-id-t1","title":"rm /srv/data/sandboxes/c_1/work"},"options":[{"optionId":"agent-secret-id-o1","name":"Allow /srv/data/sparkles.db","kind":"allow_once"}]}
x/srv/data/sandboxes/c_1/work/a.go failed
e2`,
	`{"sessionId":"sess-secret-1","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"I wrote //srv//data//sand"}}}
t2
{"sessionId":"sess-secret-1","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"boxes/./c_1//work//notes.txt and /srv/./data/tok"}}}
t9
{"sessionId":"sess-secret-1","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"en."}}}
{"sessionId":"sess-secret-1","update":{"sessionUpdate":"tool_call","toolCallId":"agent-secret-id-t1","title":"cat //srv/data/sandboxes//c_2/work/x","kind":"read","locations":[{"path":"/srv/data//sandboxes/c_1/./work/a.go"}]}}
p{"sessionId":"sess-secret-1","toolCall":{"toolCallId":"agent-secret-id-t1","title":"rm /srv/data/./sandboxes/c_1/work/."},"options":[{"optionId":"agent-secret-id-o1","name":"Allow file:///srv//data/sparkles.db","kind":"allow_once"}]}
x//srv//data/sandboxes/c_1/work/a.go failed
e2`,
	`{"sessionId":"sess-secret-1","update":{"sessionUpdate":"plan_update","entries":[{"content":"zq-canary-7f3a9","priority":"high","status":"pending"}]}}
{"sessionId":"sess-secret-1","update":{"sessionUpdate":"brand_new","messageId":"agent-secret-id-m9"}}
{"sessionId":"sess-secret-1","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"image","data":"zq-canary-7f3a9"}}}
xthe agent said zq-canary-7f3a9
e2
{"sessionId":"sess-secret-1","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"Bearer sk-ant-api03-abcdefghijklmnopqrstuvwxyz"}}}
e3`,
	`{"sessionId":"sess-secret-1","update":{"sessionUpdate":"tool_call","toolCallId":"agent-secret-id-t1","title":"make","kind":"execute","status":"in_progress","content":[{"type":"terminal","terminalId":"agent-secret-id-term"}],"_meta":{"terminal_info":{"terminal_id":"agent-secret-id-term"}}}}
{"sessionId":"sess-secret-1","update":{"sessionUpdate":"tool_call_update","toolCallId":"agent-secret-id-t1","_meta":{"terminal_output":{"terminal_id":"agent-secret-id-term","data":"\u001b[31mzq-can"}}}}
t2
{"sessionId":"sess-secret-1","update":{"sessionUpdate":"tool_call_update","toolCallId":"agent-secret-id-t1","_meta":{"terminal_output":{"terminal_id":"agent-secret-id-term","data":"ary-7f3a9 /srv/data/sandboxes/c_1/work/a.go /srv/da"}}}}
t9
{"sessionId":"sess-secret-1","update":{"sessionUpdate":"tool_call_update","toolCallId":"agent-secret-id-t1","_meta":{"terminal_output":{"terminal_id":"agent-secret-id-term","data":"ta/token\r\n"}}}}
{"sessionId":"sess-secret-1","update":{"sessionUpdate":"tool_call_update","toolCallId":"agent-secret-id-t1","status":"completed","_meta":{"terminal_exit":{"terminal_id":"agent-secret-id-term","exit_code":1,"signal":null}}}}
e0`,
}

func FuzzTranslate(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add([]byte(s))
	}
	// The recorded scenarios, in the fuzz grammar.
	for _, sc := range scenarios {
		var b strings.Builder
		for _, line := range strings.Split(sc.script, "\n") {
			op, rest, _ := strings.Cut(strings.TrimSpace(line), " ")
			switch op {
			case "update":
				b.WriteString(rest + "\n")
			case "perm":
				b.WriteString("p" + rest + "\n")
			case "tick":
				b.WriteString("t\x14\n")
			case "resolve":
				b.WriteString("r1\n")
			case "end":
				b.WriteString("e0\n")
			}
		}
		f.Add([]byte(b.String()))
	}
	f.Fuzz(fuzzTranslate)
}

// fuzzTranslate plays one fuzz input through a Translator and checks every
// event it emitted.
func fuzzTranslate(t *testing.T, data []byte) {
	c := &clock{t: epoch}
	tr := New(Config{
		SandboxID:     "c_1",
		Dir:           testDir,
		DataDir:       testDataDir,
		Secrets:       []string{canary},
		FlushInterval: 5 * time.Millisecond,
		Now:           c.Now,
		NewID:         seqIDs(),
		ToolOutput:    true,
	})
	var evs []*sandbox.Event
	evs = append(evs, tr.StartTurn("turn_1", sandbox.TextInput("go"))...)
	turns := 1
	for _, line := range bytes.Split(data, []byte("\n")) {
		if len(line) == 0 {
			continue
		}
		arg := byte(0)
		if len(line) > 1 {
			arg = line[1]
		}
		switch line[0] {
		case 'p':
			_, more := tr.RequestPermission(line[1:])
			evs = append(evs, more...)
		case 'r':
			if p := tr.Pending(); len(p) > 0 {
				decisions := []string{"approved", "denied", "canceled", "failed", "", "bogus"}
				_, more, _ := tr.ResolveApproval(p[0].ApprovalID, decisions[int(arg)%len(decisions)], "", "")
				evs = append(evs, more...)
			}
		case 't':
			c.t = c.t.Add(time.Duration(arg) * time.Millisecond)
			evs = append(evs, tr.Flush()...)
		case 'e':
			results := []TurnResult{
				{StopReason: "end_turn"},
				{Canceled: true},
				{Err: &sandbox.ErrorInfo{Code: sandbox.ErrAgentExited, Message: "exited " + canary}},
				{StopReason: string(line[1:])},
			}
			evs = append(evs, tr.EndTurn(results[int(arg)%len(results)])...)
			turns++
			evs = append(evs, tr.StartTurn("turn_"+strconv.Itoa(turns), nil)...)
		case 'x':
			evs = append(evs, tr.Error(string(arg), string(line[1:]))...)
		default:
			evs = append(evs, tr.Update(line)...)
		}
	}
	evs = append(evs, tr.EndTurn(TurnResult{StopReason: "end_turn"})...)
	checkFuzzEvents(t, evs)
}

// freeText are the data fields that carry text of the agent's making; the
// agent may write anything there, even strings that look like its ids
// (a plan entry's content included).
var freeText = map[string]bool{"text": true, "title": true, "label": true, "path": true, "message": true, "content": true}

func checkFuzzEvents(t *testing.T, evs []*sandbox.Event) {
	allowed := map[string]bool{}
	for _, k := range strings.Fields(`input type text status stop_reason error code message duration_ms usage
		input_tokens output_tokens total_tokens context_tokens context_window message_id part_id index kind parts tool_call_id title
		locations path line approval_id options option_id label expires_at decision reason
		changes added modified deleted files change truncated turn_id
		entries content priority amount currency cost exit_code`) {
		allowed[k] = true
	}
	requested := map[string]int{}
	resolved := map[string]int{}
	completed := map[string]bool{}
	messages := map[string]int{}
	for _, ev := range evs {
		b, err := json.Marshal(ev)
		if err != nil {
			t.Fatalf("marshal %s: %v", ev.Type, err)
		}
		if bytes.Contains(b, []byte(canary)) {
			t.Fatalf("%s carries the secret: %s", ev.Type, b)
		}
		if ev.TurnID != "" && completed[ev.TurnID] {
			t.Fatalf("%s after turn.completed of %s", ev.Type, ev.TurnID)
		}
		data := mustJSON(t, ev.Data)
		checkKeys(t, ev.Type, data, allowed)
		// Outside the free text, nothing may come from the agent.
		var v any
		if err := json.Unmarshal(data, &v); err != nil {
			t.Fatal(err)
		}
		if p, ok := absUnder(v, testDataDir); ok {
			t.Fatalf("%s carries the absolute path %q: %s", ev.Type, p, data)
		}
		blank(v)
		rest := string(mustJSON(t, v))
		for _, f := range []string{"agent-secret-id", "sess-secret", "meta-canary", "raw-canary", "rawInput", "rawOutput", "_meta", "sessionId"} {
			if strings.Contains(rest, f) {
				t.Fatalf("%s carries %q: %s", ev.Type, f, data)
			}
		}
		switch d := ev.Data.(type) {
		case *sandbox.TurnCompleted:
			completed[ev.TurnID] = true
		case *sandbox.MessageCompleted:
			if messages[ev.TurnID]++; messages[ev.TurnID] > 1 || strings.TrimSpace(d.Text) == "" {
				t.Fatalf("message.completed %d of %s, text %q", messages[ev.TurnID], ev.TurnID, d.Text)
			}
		case *sandbox.ApprovalRequested:
			requested[d.ApprovalID]++
		case *sandbox.ApprovalResolved:
			resolved[d.ApprovalID]++
		case *sandbox.MessageUpdated:
			if !strings.HasPrefix(d.MessageID, sandbox.PrefixMessage) || !strings.HasPrefix(d.PartID, sandbox.PrefixPart) {
				t.Fatalf("message.updated ids %q %q", d.MessageID, d.PartID)
			}
		case *sandbox.ToolUpdated:
			if !strings.HasPrefix(d.ToolCallID, sandbox.PrefixTool) {
				t.Fatalf("tool.updated id %q", d.ToolCallID)
			}
		}
	}
	for id, n := range requested {
		if n != 1 || resolved[id] != 1 {
			t.Fatalf("approval %s requested %d times, resolved %d times", id, n, resolved[id])
		}
	}
	for id := range resolved {
		if requested[id] != 1 {
			t.Fatalf("approval %s resolved but never requested", id)
		}
	}
}

// absUnder returns a string of decoded event data that holds an absolute
// path under root, as the rewrite tells one from another name ("/srv/data"
// in "/srv/database" is none), spelled as it is or with repeated slashes
// and "." segments.
func absUnder(v any, root string) (string, bool) {
	switch v := v.(type) {
	case string:
		if holdsRoot(v, root, func(p int) bool { return pathStart(v, p) }) {
			return v, true
		}
		for _, r := range uncleanRuns(v) {
			c, _, joined := cleanPath(v[r[0]:r[1]], false)
			if holdsRoot(c, root, func(p int) bool { return p == 0 || !isNameChar(c[p-1]) || joined[p] }) {
				return v, true
			}
		}
	case map[string]any:
		for _, x := range v {
			if s, ok := absUnder(x, root); ok {
				return s, true
			}
		}
	case []any:
		for _, x := range v {
			if s, ok := absUnder(x, root); ok {
				return s, true
			}
		}
	}
	return "", false
}

func holdsRoot(s, root string, start func(p int) bool) bool {
	for off := 0; off < len(s); {
		j := strings.Index(s[off:], root)
		if j < 0 {
			return false
		}
		p := off + j
		if start(p) && !nameGoesOn(s, p+len(root)) {
			return true
		}
		off = p + 1
	}
	return false
}

// blank empties the free-text fields of decoded event data.
func blank(v any) {
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			if _, ok := x.(string); ok && freeText[k] {
				v[k] = ""
				continue
			}
			blank(x)
		}
	case []any:
		for _, x := range v {
			blank(x)
		}
	}
}
