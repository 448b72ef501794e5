package translate

import (
	"fmt"
	"strings"
	"testing"
)

// Recorded ACP fragments, as agents send them. Every id of the agent's own
// contains "agent-secret-id" and the session "sess-secret", so the harness
// can tell that none of them is ever forwarded.

// chunk is an agent_message_chunk line without a messageId.
func chunk(text string) string {
	return fmt.Sprintf(`update {"sessionId":"sess-secret-1","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":%q}}}`, text)
}

// manyChunks is twenty one-letter chunks a millisecond apart. The letter
// starts no token shape, so the first chunk is not held back.
func manyChunks() string {
	var b strings.Builder
	for range 20 {
		b.WriteString(chunk("o") + "\ntick 1ms\n")
	}
	return b.String()
}

var scenarios = []struct {
	name   string
	script string
	want   string
}{
	{
		name: "OK",
		script: `
start turn_1 hello
update {"sessionId":"sess-secret-1","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"Hel","_meta":{"x":"meta-canary"}},"_meta":{"y":"meta-canary"}}}
tick 10ms
update {"sessionId":"sess-secret-1","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"lo"}}}
next
tick 10ms
update {"sessionId":"sess-secret-1","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":" wor"}}}
flush
tick 30ms
flush
next
update {"sessionId":"sess-secret-1","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"ld"}}}
tick 5ms
end end_turn
`,
		want: `
turn.started turn_1 {"input":[{"type":"text","text":"hello"}]}
message.updated turn_1 {"message_id":"msg_1","part_id":"part_1","index":0,"kind":"text","text":"Hel"}
=> next +40ms
message.updated turn_1 {"message_id":"msg_1","part_id":"part_1","index":0,"kind":"text","text":"Hello wor"}
=> next none
message.updated turn_1 {"message_id":"msg_1","part_id":"part_1","index":0,"kind":"text","text":"Hello world"}
message.completed turn_1 {"message_id":"msg_1","parts":[{"part_id":"part_1","index":0,"kind":"text","text":"Hello world"}],"text":"Hello world"}
turn.completed turn_1 {"status":"succeeded","stop_reason":"end_turn","error":null,"duration_ms":55,"usage":null,"changes":null}
`,
	},
	{
		name:   "CoalesceWithinInterval",
		script: "start turn_1 count\n" + manyChunks() + "end end_turn",
		want: `
turn.started turn_1 {"input":[{"type":"text","text":"count"}]}
message.updated turn_1 {"message_id":"msg_1","part_id":"part_1","index":0,"kind":"text","text":"o"}
message.updated turn_1 {"message_id":"msg_1","part_id":"part_1","index":0,"kind":"text","text":"oooooooooooooooooooo"}
message.completed turn_1 {"message_id":"msg_1","parts":[{"part_id":"part_1","index":0,"kind":"text","text":"oooooooooooooooooooo"}],"text":"oooooooooooooooooooo"}
turn.completed turn_1 {"status":"succeeded","stop_reason":"end_turn","error":null,"duration_ms":20,"usage":null,"changes":null}
`,
	},
	{
		name: "ReasoningThenText",
		script: `
start turn_1 why
update {"sessionId":"sess-secret-1","update":{"sessionUpdate":"agent_thought_chunk","content":{"type":"text","text":"Let me think"},"messageId":null}}
update {"sessionId":"sess-secret-1","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"Because."}}}
end end_turn
`,
		want: `
turn.started turn_1 {"input":[{"type":"text","text":"why"}]}
message.updated turn_1 {"message_id":"msg_1","part_id":"part_1","index":0,"kind":"reasoning","text":"Let me think"}
message.updated turn_1 {"message_id":"msg_1","part_id":"part_2","index":1,"kind":"text","text":"Because."}
message.completed turn_1 {"message_id":"msg_1","parts":[{"part_id":"part_1","index":0,"kind":"reasoning","text":"Let me think"},{"part_id":"part_2","index":1,"kind":"text","text":"Because."}],"text":"Because."}
turn.completed turn_1 {"status":"succeeded","stop_reason":"end_turn","error":null,"duration_ms":0,"usage":null,"changes":null}
`,
	},
	{
		name: "MessageIDChange",
		script: `
start turn_1 two messages
update {"sessionId":"sess-secret-1","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"Intro"}}}
tick 60ms
update {"sessionId":"sess-secret-1","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":" more"},"messageId":"agent-secret-id-m1"}}
update {"sessionId":"sess-secret-1","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"Second"},"messageId":"agent-secret-id-m2"}}
update {"sessionId":"sess-secret-1","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"!"},"messageId":null}}
update {"sessionId":"sess-secret-1","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"back"},"messageId":"agent-secret-id-m1"}}
end end_turn
`,
		want: `
turn.started turn_1 {"input":[{"type":"text","text":"two messages"}]}
message.updated turn_1 {"message_id":"msg_1","part_id":"part_1","index":0,"kind":"text","text":"Intro"}
message.updated turn_1 {"message_id":"msg_1","part_id":"part_1","index":0,"kind":"text","text":"Intro more"}
message.updated turn_1 {"message_id":"msg_2","part_id":"part_2","index":0,"kind":"text","text":"Second"}
message.updated turn_1 {"message_id":"msg_2","part_id":"part_2","index":0,"kind":"text","text":"Second!"}
message.updated turn_1 {"message_id":"msg_1","part_id":"part_3","index":1,"kind":"text","text":"back"}
message.completed turn_1 {"message_id":"msg_1","parts":[{"part_id":"part_1","index":0,"kind":"text","text":"Intro more"},{"part_id":"part_3","index":1,"kind":"text","text":"back"}],"text":"Intro more\n\nback"}
turn.completed turn_1 {"status":"succeeded","stop_reason":"end_turn","error":null,"duration_ms":60,"usage":null,"changes":null}
`,
	},
	{
		name: "ToolsDuplicateAndLocations",
		script: "start turn_1 fix it\n" + chunk("Looking") + `
update {"sessionId":"sess-secret-1","update":{"sessionUpdate":"tool_call","toolCallId":"agent-secret-id-t1","title":"Read a.go","kind":"read","status":"pending","locations":[{"path":"/srv/data/sandboxes/c_1/work/src/a.go","line":3},{"path":"/etc/passwd"},{"path":"/srv/data/sandboxes/c_1/work/../../c_2/work/secret.txt"},{"path":"/srv/data/sandboxes/c_1/work2/x"},{"path":"rel/b.go"},{"path":"../escape"},{"path":""}],"rawInput":{"path":"raw-canary"},"content":[{"type":"content","content":{"type":"text","text":"raw-canary"}}],"_meta":{"a":"meta-canary"}}}
update {"sessionId":"sess-secret-1","update":{"sessionUpdate":"tool_call","toolCallId":"agent-secret-id-t1","title":"Read a.go","kind":"read","status":"in_progress"}}
update {"sessionId":"sess-secret-1","update":{"sessionUpdate":"tool_call","toolCallId":"agent-secret-id-t1","title":"Read a.go","kind":"read","status":"in_progress"}}
` + chunk(" done") + `
update {"sessionId":"sess-secret-1","update":{"sessionUpdate":"tool_call_update","toolCallId":"agent-secret-id-t1","status":"completed","rawOutput":{"out":"raw-canary"},"content":[{"type":"diff","path":"/x","oldText":"raw-canary","newText":"raw-canary"}]}}
update {"sessionId":"sess-secret-1","update":{"sessionUpdate":"tool_call_update","toolCallId":"agent-secret-id-t1","title":null,"kind":null,"status":null,"locations":null}}
update {"sessionId":"sess-secret-1","update":{"sessionUpdate":"tool_call_update","toolCallId":"agent-secret-id-t2","title":"Switch","kind":"switch_mode","status":"in_progress"}}
update {"sessionId":"sess-secret-1","update":{"sessionUpdate":"tool_call_update","toolCallId":"agent-secret-id-t3","kind":"fetch","status":"failed","locations":[]}}
end end_turn
`,
		want: `
turn.started turn_1 {"input":[{"type":"text","text":"fix it"}]}
message.updated turn_1 {"message_id":"msg_1","part_id":"part_1","index":0,"kind":"text","text":"Looking"}
tool.updated turn_1 {"tool_call_id":"tool_1","title":"Read a.go","kind":"read","status":"pending","locations":[{"path":"src/a.go","line":3},{"path":"rel/b.go","line":null}]}
tool.updated turn_1 {"tool_call_id":"tool_1","title":"Read a.go","kind":"read","status":"running","locations":[{"path":"src/a.go","line":3},{"path":"rel/b.go","line":null}]}
message.updated turn_1 {"message_id":"msg_1","part_id":"part_2","index":1,"kind":"text","text":" done"}
tool.updated turn_1 {"tool_call_id":"tool_1","title":"Read a.go","kind":"read","status":"completed","locations":[{"path":"src/a.go","line":3},{"path":"rel/b.go","line":null}]}
tool.updated turn_1 {"tool_call_id":"tool_2","title":"Switch","kind":"other","status":"running","locations":[]}
tool.updated turn_1 {"tool_call_id":"tool_3","title":"","kind":"fetch","status":"failed","locations":[]}
message.completed turn_1 {"message_id":"msg_1","parts":[{"part_id":"part_1","index":0,"kind":"text","text":"Looking"},{"part_id":"part_2","index":1,"kind":"text","text":" done"}],"text":"Looking\n\n done"}
tool.updated turn_1 {"tool_call_id":"tool_2","title":"Switch","kind":"other","status":"completed","locations":[]}
turn.completed turn_1 {"status":"succeeded","stop_reason":"end_turn","error":null,"duration_ms":0,"usage":null,"changes":null}
`,
	},
	{
		// A plan is curated field by field, redacted, path-rewritten and
		// bounded; an unchanged one is not sent again; it closes the part.
		name: "Plan",
		script: "start turn_1 plan it\n" + chunk("Plan:") + `
update {"sessionId":"sess-secret-1","update":{"sessionUpdate":"plan","entries":[{"content":"Read /srv/data/sandboxes/c_1/work/src/a.go","priority":"high","status":"in_progress","_meta":{"m":"meta-canary"}},{"content":"Use the key hunter2-supersecret-value","priority":"bogus","status":"weird"},{"content":"` + strings.Repeat("é", 600) + `","priority":"low","status":"completed"}],"_meta":{"m":"meta-canary"}}}
update {"sessionId":"sess-secret-1","update":{"sessionUpdate":"plan","entries":[{"content":"Read /srv/data/sandboxes/c_1/work/src/a.go","priority":"high","status":"in_progress"},{"content":"Use the key hunter2-supersecret-value","priority":"bogus","status":"weird"},{"content":"` + strings.Repeat("é", 600) + `","priority":"low","status":"completed"}]}}
` + chunk("go") + `
update {"sessionId":"sess-secret-1","update":{"sessionUpdate":"plan","entries":[]}}
update {"sessionId":"sess-secret-1","update":{"sessionUpdate":"plan","entries":"raw-canary"}}
end end_turn
`,
		want: `
turn.started turn_1 {"input":[{"type":"text","text":"plan it"}]}
message.updated turn_1 {"message_id":"msg_1","part_id":"part_1","index":0,"kind":"text","text":"Plan:"}
plan.updated turn_1 {"entries":[{"content":"Read src/a.go","status":"in_progress","priority":"high"},{"content":"Use the key [REDACTED]","status":"pending","priority":"medium"},{"content":"` + strings.Repeat("é", 499) + `…","status":"completed","priority":"low"}]}
message.updated turn_1 {"message_id":"msg_1","part_id":"part_2","index":1,"kind":"text","text":"go"}
plan.updated turn_1 {"entries":[]}
message.completed turn_1 {"message_id":"msg_1","parts":[{"part_id":"part_1","index":0,"kind":"text","text":"Plan:"},{"part_id":"part_2","index":1,"kind":"text","text":"go"}],"text":"Plan:\n\ngo"}
turn.completed turn_1 {"status":"succeeded","stop_reason":"end_turn","error":null,"duration_ms":0,"usage":null,"changes":null}
`,
	},
	{
		name: "PermissionForUnannouncedTool",
		script: `
start turn_1 deploy
perm {"sessionId":"sess-secret-1","toolCall":{"toolCallId":"agent-secret-id-t9","title":"Run make deploy","kind":"execute","status":"pending","rawInput":{"command":"raw-canary"}},"options":[{"optionId":"agent-secret-id-allow","name":"Allow once","kind":"allow_once"},{"optionId":"agent-secret-id-always","name":"Always allow","kind":"allow_always"},{"optionId":"agent-secret-id-reject","name":"Reject","kind":"reject_once"},{"optionId":"agent-secret-id-weird","name":"Ask mom","kind":"ask_mom"}],"_meta":{"m":"meta-canary"}}
tick 1s
resolve appr_1 approved - -
resolve appr_1 denied - -
resolve appr_9 approved - -
perm {"sessionId":"sess-secret-1","toolCall":{"toolCallId":"agent-secret-id-t9"},"options":[{"optionId":"agent-secret-id-never","name":"Never","kind":"reject_always"}]}
resolve appr_2 approved - -
resolve appr_2 - opt_1 -
perm {"sessionId":"sess-secret-1","toolCall":{"toolCallId":"agent-secret-id-t9"},"options":[{"optionId":"agent-secret-id-weird","name":"Ask mom","kind":"ask_mom"}]}
end end_turn
`,
		want: `
turn.started turn_1 {"input":[{"type":"text","text":"deploy"}]}
tool.updated turn_1 {"tool_call_id":"tool_1","title":"Run make deploy","kind":"execute","status":"pending","locations":[]}
approval.requested turn_1 {"approval_id":"appr_1","tool_call_id":"tool_1","title":"Run make deploy","kind":"execute","options":[{"option_id":"opt_1","kind":"allow_once","label":"Allow once"},{"option_id":"opt_2","kind":"allow_always","label":"Always allow"},{"option_id":"opt_3","kind":"reject_once","label":"Reject"}],"expires_at":"2026-08-06T12:10:00.000Z"}
=> pending appr_1 opt_1=agent-secret-id-allow,opt_2=agent-secret-id-always,opt_3=agent-secret-id-reject expires +10m0s
approval.resolved turn_1 {"approval_id":"appr_1","decision":"approved","option_id":"opt_1","reason":"user"}
tool.updated turn_1 {"tool_call_id":"tool_1","title":"Run make deploy","kind":"execute","status":"running","locations":[]}
=> selected agent-secret-id-allow
=> error approval_resolved
=> error not_found
tool.updated turn_1 {"tool_call_id":"tool_1","title":"Run make deploy","kind":"execute","status":"pending","locations":[]}
approval.requested turn_1 {"approval_id":"appr_2","tool_call_id":"tool_1","title":"Run make deploy","kind":"execute","options":[{"option_id":"opt_1","kind":"reject_always","label":"Never"}],"expires_at":"2026-08-06T12:10:01.000Z"}
=> pending appr_2 opt_1=agent-secret-id-never expires +10m1s
=> error invalid_request
approval.resolved turn_1 {"approval_id":"appr_2","decision":"denied","option_id":"opt_1","reason":"user"}
=> selected agent-secret-id-never
=> no approval
tool.updated turn_1 {"tool_call_id":"tool_1","title":"Run make deploy","kind":"execute","status":"canceled","locations":[]}
turn.completed turn_1 {"status":"succeeded","stop_reason":"end_turn","error":null,"duration_ms":1000,"usage":null,"changes":null}
`,
	},
	{
		name: "UnknownAndIgnoredKinds",
		script: "start turn_1 plan it\n" + chunk("Plan:") + `
update {"sessionId":"sess-secret-1","update":{"sessionUpdate":"plan_update","entries":[{"content":"raw-canary","priority":"high","status":"pending"}]}}
update {"sessionId":"sess-secret-1","update":{"sessionUpdate":"available_commands_update","availableCommands":[{"name":"raw-canary","description":"x"}]}}
update {"sessionId":"sess-secret-1","update":{"sessionUpdate":"usage_update","used":10,"size":100}}
update {"sessionId":"sess-secret-1","update":{"sessionUpdate":"user_message_chunk","content":{"type":"text","text":"raw-canary"}}}
update {"sessionId":"sess-secret-1","update":{"sessionUpdate":"brand_new_kind","text":"raw-canary"}}
update {"sessionId":"sess-secret-1","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"image","mimeType":"image/png","data":"raw-canary"}}}
` + chunk("go") + `
end end_turn
`,
		want: `
turn.started turn_1 {"input":[{"type":"text","text":"plan it"}]}
message.updated turn_1 {"message_id":"msg_1","part_id":"part_1","index":0,"kind":"text","text":"Plan:"}
turn.usage turn_1 {"usage":{"input_tokens":0,"output_tokens":0,"total_tokens":0,"context_tokens":10,"context_window":100}}
message.updated turn_1 {"message_id":"msg_1","part_id":"part_2","index":1,"kind":"text","text":"go"}
message.completed turn_1 {"message_id":"msg_1","parts":[{"part_id":"part_1","index":0,"kind":"text","text":"Plan:"},{"part_id":"part_2","index":1,"kind":"text","text":"go"}],"text":"Plan:\n\ngo"}
turn.completed turn_1 {"status":"succeeded","stop_reason":"end_turn","error":null,"duration_ms":0,"usage":{"input_tokens":0,"output_tokens":0,"total_tokens":0,"context_tokens":10,"context_window":100},"changes":null}
`,
	},
	{
		name: "OutsideTurn",
		script: chunk("early") + `
start turn_1 hi
` + chunk("Hi") + `
end end_turn
update {"sessionId":"sess-secret-1","update":{"sessionUpdate":"tool_call_update","toolCallId":"agent-secret-id-t1","status":"completed"}}
` + chunk("late") + `
perm {"sessionId":"sess-secret-1","toolCall":{"toolCallId":"agent-secret-id-t1"},"options":[{"optionId":"agent-secret-id-allow","name":"Allow","kind":"allow_once"}]}
flush
next
end end_turn
error agent_exited the agent exited
`,
		want: `
turn.started turn_1 {"input":[{"type":"text","text":"hi"}]}
message.updated turn_1 {"message_id":"msg_1","part_id":"part_1","index":0,"kind":"text","text":"Hi"}
message.completed turn_1 {"message_id":"msg_1","parts":[{"part_id":"part_1","index":0,"kind":"text","text":"Hi"}],"text":"Hi"}
turn.completed turn_1 {"status":"succeeded","stop_reason":"end_turn","error":null,"duration_ms":0,"usage":null,"changes":null}
=> no approval
=> next none
sandbox.error - {"code":"agent_exited","message":"the agent exited"}
`,
	},
	{
		name: "CanceledWithPendingApprovalAndRunningTool",
		script: "start turn_1 refactor\n" + chunk("Working") + `
update {"sessionId":"sess-secret-1","update":{"sessionUpdate":"tool_call","toolCallId":"agent-secret-id-t1","title":"Edit main.go","kind":"edit","status":"in_progress"}}
update {"sessionId":"sess-secret-1","update":{"sessionUpdate":"tool_call","toolCallId":"agent-secret-id-t2","title":"Read go.mod","kind":"read","status":"completed"}}
perm {"sessionId":"sess-secret-1","toolCall":{"toolCallId":"agent-secret-id-t3","title":"Delete build","kind":"delete"},"options":[{"optionId":"agent-secret-id-allow","name":"Allow","kind":"allow_once"},{"optionId":"agent-secret-id-reject","name":"Reject","kind":"reject_once"}]}
` + chunk("still") + `
tick 10ms
` + chunk(" going") + `
next
end cancel
`,
		want: `
turn.started turn_1 {"input":[{"type":"text","text":"refactor"}]}
message.updated turn_1 {"message_id":"msg_1","part_id":"part_1","index":0,"kind":"text","text":"Working"}
tool.updated turn_1 {"tool_call_id":"tool_1","title":"Edit main.go","kind":"edit","status":"running","locations":[]}
tool.updated turn_1 {"tool_call_id":"tool_2","title":"Read go.mod","kind":"read","status":"completed","locations":[]}
tool.updated turn_1 {"tool_call_id":"tool_3","title":"Delete build","kind":"delete","status":"pending","locations":[]}
approval.requested turn_1 {"approval_id":"appr_1","tool_call_id":"tool_3","title":"Delete build","kind":"delete","options":[{"option_id":"opt_1","kind":"allow_once","label":"Allow"},{"option_id":"opt_2","kind":"reject_once","label":"Reject"}],"expires_at":"2026-08-06T12:10:00.000Z"}
=> pending appr_1 opt_1=agent-secret-id-allow,opt_2=agent-secret-id-reject expires +10m0s
message.updated turn_1 {"message_id":"msg_1","part_id":"part_2","index":1,"kind":"text","text":"still"}
=> next +40ms
message.updated turn_1 {"message_id":"msg_1","part_id":"part_2","index":1,"kind":"text","text":"still going"}
message.completed turn_1 {"message_id":"msg_1","parts":[{"part_id":"part_1","index":0,"kind":"text","text":"Working"},{"part_id":"part_2","index":1,"kind":"text","text":"still going"}],"text":"Working\n\nstill going"}
approval.resolved turn_1 {"approval_id":"appr_1","decision":"canceled","option_id":"","reason":"turn_canceled"}
tool.updated turn_1 {"tool_call_id":"tool_1","title":"Edit main.go","kind":"edit","status":"canceled","locations":[]}
tool.updated turn_1 {"tool_call_id":"tool_3","title":"Delete build","kind":"delete","status":"canceled","locations":[]}
turn.completed turn_1 {"status":"canceled","stop_reason":"canceled","error":null,"duration_ms":10,"usage":null,"changes":null}
`,
	},
	{
		name: "FailedAgentExited",
		script: `
start turn_1 build
update {"sessionId":"sess-secret-1","update":{"sessionUpdate":"tool_call","toolCallId":"agent-secret-id-t1","title":"make","kind":"execute","status":"in_progress"}}
perm {"sessionId":"sess-secret-1","toolCall":{"toolCallId":"agent-secret-id-t1"},"options":[{"optionId":"agent-secret-id-allow","name":"Allow","kind":"allow_once"}]}
end fail agent_exited the agent exited while holding hunter2-supersecret-value
`,
		want: `
turn.started turn_1 {"input":[{"type":"text","text":"build"}]}
tool.updated turn_1 {"tool_call_id":"tool_1","title":"make","kind":"execute","status":"running","locations":[]}
tool.updated turn_1 {"tool_call_id":"tool_1","title":"make","kind":"execute","status":"pending","locations":[]}
approval.requested turn_1 {"approval_id":"appr_1","tool_call_id":"tool_1","title":"make","kind":"execute","options":[{"option_id":"opt_1","kind":"allow_once","label":"Allow"}],"expires_at":"2026-08-06T12:10:00.000Z"}
=> pending appr_1 opt_1=agent-secret-id-allow expires +10m0s
approval.resolved turn_1 {"approval_id":"appr_1","decision":"failed","option_id":"","reason":"agent_exited"}
tool.updated turn_1 {"tool_call_id":"tool_1","title":"make","kind":"execute","status":"failed","locations":[]}
turn.completed turn_1 {"status":"failed","stop_reason":"error","error":{"code":"agent_exited","message":"the agent exited while holding [REDACTED]"},"duration_ms":0,"usage":null,"changes":null}
`,
	},
	{
		name: "FailedTimeout",
		script: `
start turn_1 build
perm {"sessionId":"sess-secret-1","toolCall":{"toolCallId":"agent-secret-id-t1","title":"make"},"options":[{"optionId":"agent-secret-id-allow","name":"Allow","kind":"allow_once"}]}
tick 2m
end fail turn_timeout the turn timed out
`,
		want: `
turn.started turn_1 {"input":[{"type":"text","text":"build"}]}
tool.updated turn_1 {"tool_call_id":"tool_1","title":"make","kind":"other","status":"pending","locations":[]}
approval.requested turn_1 {"approval_id":"appr_1","tool_call_id":"tool_1","title":"make","kind":"other","options":[{"option_id":"opt_1","kind":"allow_once","label":"Allow"}],"expires_at":"2026-08-06T12:10:00.000Z"}
=> pending appr_1 opt_1=agent-secret-id-allow expires +10m0s
approval.resolved turn_1 {"approval_id":"appr_1","decision":"canceled","option_id":"","reason":"turn_canceled"}
tool.updated turn_1 {"tool_call_id":"tool_1","title":"make","kind":"other","status":"failed","locations":[]}
turn.completed turn_1 {"status":"failed","stop_reason":"error","error":{"code":"turn_timeout","message":"the turn timed out"},"duration_ms":120000,"usage":null,"changes":null}
`,
	},
	{
		name: "SecretSplitAcrossChunks",
		script: "start turn_1 tell me\n" + chunk("The password is hunt") + "\ntick 60ms\n" + chunk("er2-super") + "\ntick 60ms\n" + chunk("secret-value, keep it safe") + `
end end_turn
`,
		want: `
turn.started turn_1 {"input":[{"type":"text","text":"tell me"}]}
message.updated turn_1 {"message_id":"msg_1","part_id":"part_1","index":0,"kind":"text","text":"The password is "}
message.updated turn_1 {"message_id":"msg_1","part_id":"part_1","index":0,"kind":"text","text":"The password is [REDACTED], keep it safe"}
message.completed turn_1 {"message_id":"msg_1","parts":[{"part_id":"part_1","index":0,"kind":"text","text":"The password is [REDACTED], keep it safe"}],"text":"The password is [REDACTED], keep it safe"}
turn.completed turn_1 {"status":"succeeded","stop_reason":"end_turn","error":null,"duration_ms":120,"usage":null,"changes":null}
`,
	},
	{
		// A part that closes is complete: what it holds shows, even the
		// start of a secret. The joined message text keeps the pieces a
		// blank line apart, so the secret does not show there whole either.
		name: "SecretSplitAcrossParts",
		script: "start turn_1 tell me\n" + chunk("key hunter2-super") + `
update {"sessionId":"sess-secret-1","update":{"sessionUpdate":"tool_call","toolCallId":"agent-secret-id-t1","title":"think","kind":"think","status":"completed"}}
` + chunk("secret-value") + `
end end_turn
`,
		want: `
turn.started turn_1 {"input":[{"type":"text","text":"tell me"}]}
message.updated turn_1 {"message_id":"msg_1","part_id":"part_1","index":0,"kind":"text","text":"key "}
message.updated turn_1 {"message_id":"msg_1","part_id":"part_1","index":0,"kind":"text","text":"key hunter2-super"}
tool.updated turn_1 {"tool_call_id":"tool_1","title":"think","kind":"think","status":"completed","locations":[]}
message.updated turn_1 {"message_id":"msg_1","part_id":"part_2","index":1,"kind":"text","text":"secret-value"}
message.completed turn_1 {"message_id":"msg_1","parts":[{"part_id":"part_1","index":0,"kind":"text","text":"key hunter2-super"},{"part_id":"part_2","index":1,"kind":"text","text":"secret-value"}],"text":"key hunter2-super\n\nsecret-value"}
turn.completed turn_1 {"status":"succeeded","stop_reason":"end_turn","error":null,"duration_ms":0,"usage":null,"changes":null}
`,
	},
	{
		name: "TokenShapesAndSecretsInEveryString",
		script: "start turn_1 my key is hunter2-supersecret-value\n" + chunk("export KEY=sk-proj-abcd") + "\ntick 60ms\n" + chunk("efghijklmnopqrstuvwx and more") + `
update {"sessionId":"sess-secret-1","update":{"sessionUpdate":"tool_call","toolCallId":"agent-secret-id-t1","title":"curl -H 'Authorization: Bearer abc123def456ghi789' -u hunter2-supersecret-value","kind":"fetch","status":"pending","locations":[{"path":"/srv/data/sandboxes/c_1/work/hunter2-supersecret-value.txt"},{"path":"/srv/data/sandboxes/c_1/work/ghp_abcdefghijklmnopqrstuvwxyz0123456789/x"}]}}
perm {"sessionId":"sess-secret-1","toolCall":{"toolCallId":"agent-secret-id-t1"},"options":[{"optionId":"agent-secret-id-allow","name":"Allow with AKIAABCDEFGHIJKLMNOP","kind":"allow_once"}]}
resolve appr_1 canceled - timeout
end end_turn
`,
		want: `
turn.started turn_1 {"input":[{"type":"text","text":"my key is [REDACTED]"}]}
message.updated turn_1 {"message_id":"msg_1","part_id":"part_1","index":0,"kind":"text","text":"export KEY="}
message.updated turn_1 {"message_id":"msg_1","part_id":"part_1","index":0,"kind":"text","text":"export KEY=[REDACTED] and more"}
tool.updated turn_1 {"tool_call_id":"tool_1","title":"curl -H 'Authorization: Bearer [REDACTED]' -u [REDACTED]","kind":"fetch","status":"pending","locations":[{"path":"[REDACTED].txt","line":null},{"path":"[REDACTED]/x","line":null}]}
approval.requested turn_1 {"approval_id":"appr_1","tool_call_id":"tool_1","title":"curl -H 'Authorization: Bearer [REDACTED]' -u [REDACTED]","kind":"fetch","options":[{"option_id":"opt_1","kind":"allow_once","label":"Allow with [REDACTED]"}],"expires_at":"2026-08-06T12:10:00.060Z"}
=> pending appr_1 opt_1=agent-secret-id-allow expires +10m0.06s
approval.resolved turn_1 {"approval_id":"appr_1","decision":"canceled","option_id":"","reason":"timeout"}
=> cancelled
message.completed turn_1 {"message_id":"msg_1","parts":[{"part_id":"part_1","index":0,"kind":"text","text":"export KEY=[REDACTED] and more"}],"text":"export KEY=[REDACTED] and more"}
tool.updated turn_1 {"tool_call_id":"tool_1","title":"curl -H 'Authorization: Bearer [REDACTED]' -u [REDACTED]","kind":"fetch","status":"canceled","locations":[{"path":"[REDACTED].txt","line":null},{"path":"[REDACTED]/x","line":null}]}
turn.completed turn_1 {"status":"succeeded","stop_reason":"end_turn","error":null,"duration_ms":60,"usage":null,"changes":null}
`,
	},
	{
		name: "StartWhileInTurn",
		script: "start turn_1 one\n" + chunk("partial") + `
start turn_2 two
end end_turn
`,
		want: `
turn.started turn_1 {"input":[{"type":"text","text":"one"}]}
message.updated turn_1 {"message_id":"msg_1","part_id":"part_1","index":0,"kind":"text","text":"partial"}
message.completed turn_1 {"message_id":"msg_1","parts":[{"part_id":"part_1","index":0,"kind":"text","text":"partial"}],"text":"partial"}
turn.completed turn_1 {"status":"failed","stop_reason":"error","error":{"code":"internal","message":"the turn was superseded by a new turn"},"duration_ms":0,"usage":null,"changes":null}
turn.started turn_2 {"input":[{"type":"text","text":"two"}]}
turn.completed turn_2 {"status":"succeeded","stop_reason":"end_turn","error":null,"duration_ms":0,"usage":null,"changes":null}
`,
	},
	{
		// Recorded from codex-acp 0.16.0 (its session ids renamed): no
		// messageId, the shell command as the title with the sandbox's
		// absolute path, the same path in an option label and in the text,
		// usage only as usage_update (context window numbers) and a prompt
		// answer without usage.
		name: "CodexExecWithAbsolutePaths",
		script: `
start turn_1 write notes.txt
update {"sessionId":"sess-secret-1","update":{"sessionUpdate":"agent_thought_chunk","content":{"type":"text","text":"\n\n"}}}
update {"sessionId":"sess-secret-1","update":{"sessionUpdate":"agent_thought_chunk","content":{"type":"text","text":"Thinking about "}}}
update {"sessionId":"sess-secret-1","update":{"sessionUpdate":"agent_thought_chunk","content":{"type":"text","text":"the task."}}}
update {"sessionId":"sess-secret-1","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"I will "}}}
update {"sessionId":"sess-secret-1","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"create /srv/data/sandboxes/c_1/work/notes.txt "}}}
update {"sessionId":"sess-secret-1","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"now."}}}
perm {"sessionId":"sess-secret-1","toolCall":{"toolCallId":"agent-secret-id-call_1","kind":"execute","status":"pending","title":"echo hello > /srv/data/sandboxes/c_1/work/notes.txt","content":[{"type":"content","content":{"type":"text","text":"raw-canary"}}],"rawInput":{"call_id":"agent-secret-id-call_1","command":["/bin/bash","-lc","raw-canary"],"cwd":"/srv/data/sandboxes/c_1/work"}},"options":[{"optionId":"agent-secret-id-approved","name":"Yes, proceed","kind":"allow_once"},{"optionId":"agent-secret-id-amend","name":"Yes, and don't ask again for commands that start with ` + "`/bin/bash -lc echo hello > /srv/data/sandboxes/c_1/work/notes.txt`" + `","kind":"allow_always"},{"optionId":"agent-secret-id-abort","name":"No, and tell Codex what to do differently","kind":"reject_once"}]}
resolve appr_1 approved - -
update {"sessionId":"sess-secret-1","update":{"sessionUpdate":"available_commands_update","availableCommands":[{"name":"review","description":"raw-canary","input":{"hint":"raw-canary"}}]}}
update {"sessionId":"sess-secret-1","update":{"sessionUpdate":"tool_call","toolCallId":"agent-secret-id-call_1","title":"echo hello > /srv/data/sandboxes/c_1/work/notes.txt","kind":"execute","status":"in_progress","rawInput":{"command":["/bin/bash","-lc","raw-canary"],"cwd":"/srv/data/sandboxes/c_1/work","source":"unified_exec_startup"}}}
update {"sessionId":"sess-secret-1","update":{"sessionUpdate":"tool_call_update","toolCallId":"agent-secret-id-call_1","status":"completed","rawOutput":{"stdout":"raw-canary"}}}
update {"sessionId":"sess-secret-1","update":{"sessionUpdate":"usage_update","used":1230,"size":258400}}
update {"sessionId":"sess-secret-1","update":{"sessionUpdate":"agent_thought_chunk","content":{"type":"text","text":"\n\n"}}}
update {"sessionId":"sess-secret-1","update":{"sessionUpdate":"agent_thought_chunk","content":{"type":"text","text":"Thinking about "}}}
update {"sessionId":"sess-secret-1","update":{"sessionUpdate":"agent_thought_chunk","content":{"type":"text","text":"the task."}}}
update {"sessionId":"sess-secret-1","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"Done: I "}}}
update {"sessionId":"sess-secret-1","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"wrote /srv/data/sandboxes/c_1/work/notes.txt "}}}
update {"sessionId":"sess-secret-1","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"for you."}}}
update {"sessionId":"sess-secret-1","update":{"sessionUpdate":"usage_update","used":1231,"size":258400}}
end end_turn
`,
		want: `
turn.started turn_1 {"input":[{"type":"text","text":"write notes.txt"}]}
message.updated turn_1 {"message_id":"msg_1","part_id":"part_1","index":0,"kind":"reasoning","text":"\n\n"}
message.updated turn_1 {"message_id":"msg_1","part_id":"part_1","index":0,"kind":"reasoning","text":"\n\nThinking about the task."}
message.updated turn_1 {"message_id":"msg_1","part_id":"part_2","index":1,"kind":"text","text":"I will "}
message.updated turn_1 {"message_id":"msg_1","part_id":"part_2","index":1,"kind":"text","text":"I will create notes.txt now."}
tool.updated turn_1 {"tool_call_id":"tool_1","title":"echo hello \u003e notes.txt","kind":"execute","status":"pending","locations":[]}
approval.requested turn_1 {"approval_id":"appr_1","tool_call_id":"tool_1","title":"echo hello \u003e notes.txt","kind":"execute","options":[{"option_id":"opt_1","kind":"allow_once","label":"Yes, proceed"},{"option_id":"opt_2","kind":"allow_always","label":"Yes, and don't ask again for commands that start with ` + "`" + `/bin/bash -lc echo hello \u003e notes.txt` + "`" + `"},{"option_id":"opt_3","kind":"reject_once","label":"No, and tell Codex what to do differently"}],"expires_at":"2026-08-06T12:10:00.000Z"}
=> pending appr_1 opt_1=agent-secret-id-approved,opt_2=agent-secret-id-amend,opt_3=agent-secret-id-abort expires +10m0s
approval.resolved turn_1 {"approval_id":"appr_1","decision":"approved","option_id":"opt_1","reason":"user"}
tool.updated turn_1 {"tool_call_id":"tool_1","title":"echo hello \u003e notes.txt","kind":"execute","status":"running","locations":[]}
=> selected agent-secret-id-approved
tool.updated turn_1 {"tool_call_id":"tool_1","title":"echo hello \u003e notes.txt","kind":"execute","status":"completed","locations":[]}
turn.usage turn_1 {"usage":{"input_tokens":0,"output_tokens":0,"total_tokens":0,"context_tokens":1230,"context_window":258400}}
message.updated turn_1 {"message_id":"msg_1","part_id":"part_3","index":2,"kind":"reasoning","text":"\n\n"}
message.updated turn_1 {"message_id":"msg_1","part_id":"part_3","index":2,"kind":"reasoning","text":"\n\nThinking about the task."}
message.updated turn_1 {"message_id":"msg_1","part_id":"part_4","index":3,"kind":"text","text":"Done: I "}
message.updated turn_1 {"message_id":"msg_1","part_id":"part_4","index":3,"kind":"text","text":"Done: I wrote notes.txt for you."}
message.completed turn_1 {"message_id":"msg_1","parts":[{"part_id":"part_1","index":0,"kind":"reasoning","text":"\n\nThinking about the task."},{"part_id":"part_2","index":1,"kind":"text","text":"I will create notes.txt now."},{"part_id":"part_3","index":2,"kind":"reasoning","text":"\n\nThinking about the task."},{"part_id":"part_4","index":3,"kind":"text","text":"Done: I wrote notes.txt for you."}],"text":"I will create notes.txt now.\n\nDone: I wrote notes.txt for you."}
turn.completed turn_1 {"status":"succeeded","stop_reason":"end_turn","error":null,"duration_ms":0,"usage":{"input_tokens":0,"output_tokens":0,"total_tokens":0,"context_tokens":1231,"context_window":258400},"changes":null}
`,
	},
	{
		// As older Claude Code adapters send it: the tool title and its
		// location with the sandbox's absolute path, allow_always listed
		// first, usage_update with a cost, and per-turn token counts in the
		// prompt answer (claude-agent-acp 0.23.1 writes titles relative
		// itself but keeps locations and shell commands absolute).
		name: "ClaudeWriteWithAbsolutePaths",
		script: "start turn_1 write notes.txt\n" + chunk("I'll write notes.txt for you now.") + `
update {"sessionId":"sess-secret-1","update":{"sessionUpdate":"tool_call","toolCallId":"agent-secret-id-toolu_1","title":"Write /srv/data/sandboxes/c_1/work/notes.txt","kind":"edit","status":"pending","locations":[{"path":"/srv/data/sandboxes/c_1/work/notes.txt"}],"rawInput":{"file_path":"/srv/data/sandboxes/c_1/work/notes.txt","content":"raw-canary"},"content":[{"type":"diff","path":"/srv/data/sandboxes/c_1/work/notes.txt","oldText":null,"newText":"raw-canary"}]}}
perm {"sessionId":"sess-secret-1","toolCall":{"toolCallId":"agent-secret-id-toolu_1","rawInput":{"file_path":"raw-canary"},"title":"Write /srv/data/sandboxes/c_1/work/notes.txt","kind":"edit","content":[],"locations":[{"path":"/srv/data/sandboxes/c_1/work/notes.txt"}]},"options":[{"kind":"allow_always","name":"Always Allow","optionId":"agent-secret-id-allow_always"},{"kind":"allow_once","name":"Allow","optionId":"agent-secret-id-allow"},{"kind":"reject_once","name":"Reject","optionId":"agent-secret-id-reject"}]}
resolve appr_1 approved - -
update {"sessionId":"sess-secret-1","update":{"sessionUpdate":"tool_call_update","toolCallId":"agent-secret-id-toolu_1","status":"completed","rawOutput":"raw-canary"}}
` + chunk("Done: I wrote /srv/data/sandboxes/c_1/work/notes.txt.") + `
update {"sessionId":"sess-secret-1","update":{"sessionUpdate":"usage_update","used":1243,"size":200000,"cost":{"amount":0.0123,"currency":"USD"}}}
end end_turn usage 3 40 1243
`,
		want: `
turn.started turn_1 {"input":[{"type":"text","text":"write notes.txt"}]}
message.updated turn_1 {"message_id":"msg_1","part_id":"part_1","index":0,"kind":"text","text":"I'll write notes.txt for you now."}
tool.updated turn_1 {"tool_call_id":"tool_1","title":"Write notes.txt","kind":"edit","status":"pending","locations":[{"path":"notes.txt","line":null}]}
approval.requested turn_1 {"approval_id":"appr_1","tool_call_id":"tool_1","title":"Write notes.txt","kind":"edit","options":[{"option_id":"opt_1","kind":"allow_always","label":"Always Allow"},{"option_id":"opt_2","kind":"allow_once","label":"Allow"},{"option_id":"opt_3","kind":"reject_once","label":"Reject"}],"expires_at":"2026-08-06T12:10:00.000Z"}
=> pending appr_1 opt_1=agent-secret-id-allow_always,opt_2=agent-secret-id-allow,opt_3=agent-secret-id-reject expires +10m0s
approval.resolved turn_1 {"approval_id":"appr_1","decision":"approved","option_id":"opt_2","reason":"user"}
tool.updated turn_1 {"tool_call_id":"tool_1","title":"Write notes.txt","kind":"edit","status":"running","locations":[{"path":"notes.txt","line":null}]}
=> selected agent-secret-id-allow
tool.updated turn_1 {"tool_call_id":"tool_1","title":"Write notes.txt","kind":"edit","status":"completed","locations":[{"path":"notes.txt","line":null}]}
message.updated turn_1 {"message_id":"msg_1","part_id":"part_2","index":1,"kind":"text","text":"Done: I wrote "}
turn.usage turn_1 {"usage":{"input_tokens":0,"output_tokens":0,"total_tokens":0,"context_tokens":1243,"context_window":200000,"cost":{"amount":0.0123,"currency":"USD"}}}
message.updated turn_1 {"message_id":"msg_1","part_id":"part_2","index":1,"kind":"text","text":"Done: I wrote notes.txt."}
message.completed turn_1 {"message_id":"msg_1","parts":[{"part_id":"part_1","index":0,"kind":"text","text":"I'll write notes.txt for you now."},{"part_id":"part_2","index":1,"kind":"text","text":"Done: I wrote notes.txt."}],"text":"I'll write notes.txt for you now.\n\nDone: I wrote notes.txt."}
turn.completed turn_1 {"status":"succeeded","stop_reason":"end_turn","error":null,"duration_ms":0,"usage":{"input_tokens":3,"output_tokens":40,"total_tokens":1243,"context_tokens":1243,"context_window":200000,"cost":{"amount":0.0123,"currency":"USD"}},"changes":null}
`,
	},
	{
		// An adapter that sends messageIds: a reasoning message, a message
		// before the tool call, the answer after it, and a last message
		// that is only a newline. Only the answer is the final message.
		name: "MessageIDsOneCompleted",
		script: `
start turn_1 write notes.txt
update {"sessionId":"sess-secret-1","update":{"sessionUpdate":"agent_thought_chunk","content":{"type":"text","text":"Planning the file."},"messageId":"agent-secret-id-m0"}}
update {"sessionId":"sess-secret-1","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"I will create notes.txt now."},"messageId":"agent-secret-id-m1"}}
update {"sessionId":"sess-secret-1","update":{"sessionUpdate":"tool_call","toolCallId":"agent-secret-id-t1","title":"Write notes.txt","kind":"edit","status":"completed"}}
update {"sessionId":"sess-secret-1","update":{"sessionUpdate":"agent_thought_chunk","content":{"type":"text","text":"It worked."},"messageId":"agent-secret-id-m2"}}
update {"sessionId":"sess-secret-1","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"Done: I wrote notes.txt."},"messageId":"agent-secret-id-m2"}}
update {"sessionId":"sess-secret-1","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"\n"},"messageId":"agent-secret-id-m3"}}
end end_turn
`,
		want: `
turn.started turn_1 {"input":[{"type":"text","text":"write notes.txt"}]}
message.updated turn_1 {"message_id":"msg_1","part_id":"part_1","index":0,"kind":"reasoning","text":"Planning the file."}
message.updated turn_1 {"message_id":"msg_2","part_id":"part_2","index":0,"kind":"text","text":"I will create notes.txt now."}
tool.updated turn_1 {"tool_call_id":"tool_1","title":"Write notes.txt","kind":"edit","status":"completed","locations":[]}
message.updated turn_1 {"message_id":"msg_3","part_id":"part_3","index":0,"kind":"reasoning","text":"It worked."}
message.updated turn_1 {"message_id":"msg_3","part_id":"part_4","index":1,"kind":"text","text":"Done: I wrote notes.txt."}
message.updated turn_1 {"message_id":"msg_4","part_id":"part_5","index":0,"kind":"text","text":"\n"}
message.completed turn_1 {"message_id":"msg_3","parts":[{"part_id":"part_3","index":0,"kind":"reasoning","text":"It worked."},{"part_id":"part_4","index":1,"kind":"text","text":"Done: I wrote notes.txt."}],"text":"Done: I wrote notes.txt."}
turn.completed turn_1 {"status":"succeeded","stop_reason":"end_turn","error":null,"duration_ms":0,"usage":null,"changes":null}
`,
	},
	{
		name: "ReasoningOnly",
		script: `
start turn_1 think
update {"sessionId":"sess-secret-1","update":{"sessionUpdate":"agent_thought_chunk","content":{"type":"text","text":"Hmm."},"messageId":"agent-secret-id-m0"}}
update {"sessionId":"sess-secret-1","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"  "},"messageId":"agent-secret-id-m1"}}
end end_turn
`,
		want: `
turn.started turn_1 {"input":[{"type":"text","text":"think"}]}
message.updated turn_1 {"message_id":"msg_1","part_id":"part_1","index":0,"kind":"reasoning","text":"Hmm."}
message.updated turn_1 {"message_id":"msg_2","part_id":"part_2","index":0,"kind":"text","text":"  "}
turn.completed turn_1 {"status":"succeeded","stop_reason":"end_turn","error":null,"duration_ms":0,"usage":null,"changes":null}
`,
	},
	{
		name: "PathSplitAcrossChunks",
		script: "start turn_1 go\n" + chunk("wrote /srv/data/sand") + "\ntick 60ms\n" + chunk("boxes/c_1/work/notes") + "\ntick 60ms\n" + chunk(".txt for you") + `
end end_turn
`,
		want: `
turn.started turn_1 {"input":[{"type":"text","text":"go"}]}
message.updated turn_1 {"message_id":"msg_1","part_id":"part_1","index":0,"kind":"text","text":"wrote "}
message.updated turn_1 {"message_id":"msg_1","part_id":"part_1","index":0,"kind":"text","text":"wrote notes.txt for you"}
message.completed turn_1 {"message_id":"msg_1","parts":[{"part_id":"part_1","index":0,"kind":"text","text":"wrote notes.txt for you"}],"text":"wrote notes.txt for you"}
turn.completed turn_1 {"status":"succeeded","stop_reason":"end_turn","error":null,"duration_ms":120,"usage":null,"changes":null}
`,
	},
	{
		name: "PathsInInputAndErrors",
		script: `
start turn_1 fix /srv/data/sandboxes/c_1/work/a.go
error internal cannot read /srv/data/sandboxes/c_1/work/a.go or /srv/data/token
end fail agent_exited the agent exited in /srv/data/sandboxes/c_1/work
`,
		want: `
turn.started turn_1 {"input":[{"type":"text","text":"fix a.go"}]}
sandbox.error turn_1 {"code":"internal","message":"cannot read a.go or [data-dir]"}
turn.completed turn_1 {"status":"failed","stop_reason":"error","error":{"code":"agent_exited","message":"the agent exited in ."},"duration_ms":0,"usage":null,"changes":null}
`,
	},
	{
		name: "Malformed",
		script: `
start turn_1 hi
update not json
update {"sessionId":"sess-secret-1","update":5}
update {"sessionId":"sess-secret-1"}
update {"sessionId":"sess-secret-1","update":{"content":{"type":"text","text":"no kind"}}}
update {"sessionId":"sess-secret-1","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":7}}}
update {"sessionId":"sess-secret-1","update":{"sessionUpdate":"agent_message_chunk"}}
update {"sessionId":"sess-secret-1","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"x"},"messageId":42}}
update {"sessionId":"sess-secret-1","update":{"sessionUpdate":"tool_call","toolCallId":12,"title":"x"}}
update {"sessionId":"sess-secret-1","update":{"sessionUpdate":"tool_call","title":"no id"}}
update {"sessionId":"sess-secret-1","update":{"sessionUpdate":"tool_call","toolCallId":"agent-secret-id-t1","locations":[{"path":"/srv/data/sandboxes/c_1/work/a","line":"three"}]}}
perm {"sessionId":"sess-secret-1","options":[]}
perm {"sessionId":"sess-secret-1","toolCall":{"toolCallId":"agent-secret-id-t1"},"options":{"a":1}}
perm []
end end_turn
`,
		want: `
turn.started turn_1 {"input":[{"type":"text","text":"hi"}]}
=> no approval
=> no approval
=> no approval
turn.completed turn_1 {"status":"succeeded","stop_reason":"end_turn","error":null,"duration_ms":0,"usage":null,"changes":null}
`,
	},
}

func TestScenarios(t *testing.T) {
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			c := &clock{t: epoch}
			tr := newScripted(c, testSecret)
			diffLines(t, run(t, tr, c, sc.script), lines(sc.want))
		})
	}
}
