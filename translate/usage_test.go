package translate

import (
	"testing"

	"github.com/sparkles-dev/sparkles/sandbox"
)

// usageLine is a usage_update line of the scripts with the given fields.
func usageLine(fields string) string {
	return `update {"sessionId":"sess-secret-1","update":{"sessionUpdate":"usage_update",` + fields + `,"_meta":{"m":"meta-canary"}}}`
}

// TestUsage: usage_update becomes turn.usage, curated field by field (counts
// not negative, an amount not negative in a currency of three letters, upper
// case), at most one per flush interval and none when nothing changed; the
// last figures reach turn.completed, with the prompt answer's token counts,
// and a turn.usage still waiting is not sent after it.
func TestUsage(t *testing.T) {
	script := "start turn_1 count\n" +
		usageLine(`"used":100,"size":1000,"cost":{"amount":0.01,"currency":"usd","_meta":{"m":"meta-canary"}}`) + "\n" +
		// The same figures again: nothing.
		usageLine(`"used":100,"size":1000,"cost":{"amount":0.01,"currency":"USD"}`) + "\n" +
		"tick 10ms\n" +
		// Within the interval: held, the cost kept from before.
		usageLine(`"used":200,"size":1000`) + "\n" +
		"next\nflush\ntick 40ms\nnext\nflush\nnext\n" +
		// Nothing that makes sense: nothing.
		usageLine(`"used":-5,"cost":{"amount":-1,"currency":"USD"}`) + "\n" +
		usageLine(`"cost":{"amount":0.02,"currency":"US$"}`) + "\n" +
		usageLine(`"cost":{"amount":"0.02","currency":"USD"}`) + "\n" +
		usageLine(`"cost":{"currency":"USD"}`) + "\n" +
		"tick 50ms\n" +
		usageLine(`"used":300,"size":1000,"cost":{"amount":0.03,"currency":"EUR"}`) + "\n" +
		"tick 1ms\n" +
		usageLine(`"used":400,"size":1000`) + "\n" +
		"next\n" +
		"end end_turn usage 3 40 43\n" +
		"next\n"
	want := `
turn.started turn_1 {"input":[{"type":"text","text":"count"}]}
turn.usage turn_1 {"usage":{"input_tokens":0,"output_tokens":0,"total_tokens":0,"context_tokens":100,"context_window":1000,"cost":{"amount":0.01,"currency":"USD"}}}
=> next +40ms
=> next +0s
turn.usage turn_1 {"usage":{"input_tokens":0,"output_tokens":0,"total_tokens":0,"context_tokens":200,"context_window":1000,"cost":{"amount":0.01,"currency":"USD"}}}
=> next none
turn.usage turn_1 {"usage":{"input_tokens":0,"output_tokens":0,"total_tokens":0,"context_tokens":300,"context_window":1000,"cost":{"amount":0.03,"currency":"EUR"}}}
=> next +49ms
turn.completed turn_1 {"status":"succeeded","stop_reason":"end_turn","error":null,"duration_ms":101,"usage":{"input_tokens":3,"output_tokens":40,"total_tokens":43,"context_tokens":400,"context_window":1000,"cost":{"amount":0.03,"currency":"EUR"}},"changes":null}
=> next none
`
	c := &clock{t: epoch}
	tr := newScripted(c, testSecret)
	diffLines(t, run(t, tr, c, script), lines(want))
	if got, want := tr.Stats().Dropped[DropMalformed], 4; got != want {
		t.Fatalf("dropped[%s] = %d, want %d (the costs that make no sense)", DropMalformed, got, want)
	}
}

// TestUsageFlushOnly: a turn.usage waiting for its interval goes out with
// the next Flush even when no message part is open, and a new turn starts
// with no usage of the last one.
func TestUsageFlushOnly(t *testing.T) {
	c := &clock{t: epoch}
	tr := newScripted(c, testSecret)
	run(t, tr, c, "start turn_1 a\n"+usageLine(`"used":1,"size":10`)+"\n"+usageLine(`"used":2,"size":10`)+"\n")
	if evs := tr.Flush(); len(evs) != 0 {
		t.Fatalf("Flush within the interval = %d events, want none", len(evs))
	}
	c.t = c.t.Add(DefaultFlushInterval)
	evs := tr.Flush()
	if len(evs) != 1 || evs[0].Type != sandbox.TypeTurnUsage || evs[0].Data.(*sandbox.TurnUsage).Usage.ContextTokens != 2 {
		t.Fatalf("Flush = %+v, want one turn.usage of 2 tokens", evs)
	}
	tr.EndTurn(TurnResult{StopReason: "end_turn"})
	tr.StartTurn("turn_2", nil)
	evs = tr.EndTurn(TurnResult{StopReason: "end_turn"})
	if d := evs[len(evs)-1].Data.(*sandbox.TurnCompleted); d.Usage != nil {
		t.Fatalf("turn_2 usage %+v, want null: it said nothing", d.Usage)
	}
}
