package agent

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func init() { fakeAgents["fsloop"] = fakeFSLoop }

// fsLoopSpec is what the fsloop agent is told in a prompt: send this request
// N times, one after the other. With Repeat, the agent sets params.content
// to Fill repeated that many times itself, so that the test process does not
// pay for a large write's content before measuring what the write costs.
type fsLoopSpec struct {
	N      int            `json:"n"`
	Method string         `json:"method"`
	Params map[string]any `json:"params"`
	Fill   string         `json:"fill,omitempty"`
	Repeat int            `json:"repeat,omitempty"`
}

// fsLoopReport is what the fsloop agent reports of the answers it read. The
// first answer comes as hashes: sending it back whole would cost the test
// process more than the read it measures; and a large one is only hashed
// as it is, since decoding it would cost the agent more time than a test
// under the race detector has.
type fsLoopReport struct {
	Bytes   int64     `json:"bytes"`    // of every answer line
	Errors  int       `json:"errors"`   // answers that were errors
	First   *RPCError `json:"first"`    // the first error
	Len     int       `json:"len"`      // of the first answer's content, up to 2 MiB
	Sum     string    `json:"sum"`      // of the first answer's content, up to 2 MiB
	LineSum string    `json:"line_sum"` // of the first answer's line
}

func sum(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}

// fakeFSLoop sends the same fs request many times and reads each answer line
// without decoding it (but the first, when small), so that what a benchmark
// measures on the client side is the client's work, not the agent's.
func fakeFSLoop() int {
	f := newFakePeer()
	f.handshake()
	for {
		id, text := f.prompt()
		var spec fsLoopSpec
		json.Unmarshal([]byte(text), &spec)
		params := mustJSON(spec.Params)
		if spec.Repeat > 0 {
			// Spliced rather than marshaled: encoding/json takes seconds
			// for megabytes under the race detector.
			fill := mustJSON(spec.Fill)
			params = slices.Concat([]byte(`{"content":"`), bytes.Repeat(fill[1:len(fill)-1], spec.Repeat), []byte(`",`), params[1:])
		}
		req := slices.Concat([]byte(`{"jsonrpc":"2.0","id":"fs","method":`), mustJSON(spec.Method), []byte(`,"params":`), params, []byte(`}`))
		var rep fsLoopReport
		for i := range spec.N {
			f.raw(string(req))
			h := sha256.New()
			var line []byte // the answer, while it is small enough to decode
			whole := true
			for {
				chunk, err := f.in.ReadSlice('\n')
				rep.Bytes += int64(len(chunk))
				if i == 0 {
					h.Write(chunk)
				}
				if whole = whole && len(line)+len(chunk) <= 2<<20; whole {
					line = append(line, chunk...)
				}
				if err == nil {
					break
				}
				if !errors.Is(err, bufio.ErrBufferFull) {
					return 2
				}
			}
			if i == 0 {
				rep.LineSum = hex.EncodeToString(h.Sum(nil))
			}
			if bytes.Contains(line[:min(len(line), 256)], []byte(`"error":`)) {
				rep.Errors++
				if rep.First == nil {
					var m message
					json.Unmarshal(line, &m)
					rep.First = m.Error
				}
			} else if i == 0 && whole {
				var m struct {
					Result readResult `json:"result"`
				}
				json.Unmarshal(line, &m)
				rep.Len, rep.Sum = len(m.Result.Content), sum(m.Result.Content)
			}
		}
		f.update(map[string]any{"sessionUpdate": "fsloop", "report": rep})
		f.answer(id, map[string]any{"stopReason": "end_turn"})
	}
}

// fsLoop has the agent send a request n times and returns its report.
func fsLoop(t testing.TB, c *Conn, n int, method string, params map[string]any) fsLoopReport {
	t.Helper()
	return fsLoopSpecified(t, c, fsLoopSpec{N: n, Method: method, Params: params})
}

func fsLoopSpecified(t testing.TB, c *Conn, spec fsLoopSpec) fsLoopReport {
	t.Helper()
	if err := c.Prompt("turn_fs", string(mustJSON(spec))); err != nil {
		t.Fatal(err)
	}
	var rep fsLoopReport
	for _, in := range until(t, c, PromptDone) {
		if in.Kind != Update {
			continue
		}
		var u struct {
			Update struct {
				Report *fsLoopReport `json:"report"`
			} `json:"update"`
		}
		mustUnmarshal(t, in.Params, &u)
		if u.Update.Report != nil {
			rep = *u.Update.Report
		}
	}
	return rep
}

// sourceText is about size bytes of text shaped like Go source: tabs,
// quotes, backslashes and newlines, which JSON escapes, and some non-ASCII.
func sourceText(size int) string {
	const unit = "\tif err := f(\"päth\\n\", x); err != nil { // ok → done\n\t\treturn fmt.Errorf(\"read %q: %w\", name, err)\n\t}\n"
	return strings.Repeat(unit, size/len(unit)+1)[:size]
}

// BenchmarkReadTextFile is an agent reading a 1 MiB source file through
// fs/read_text_file: the server's allocations per read are its cost.
func BenchmarkReadTextFile(b *testing.B) {
	dir := b.TempDir()
	text := sourceText(1 << 20)
	if err := os.WriteFile(filepath.Join(dir, "big.go"), []byte(text), 0o644); err != nil {
		b.Fatal(err)
	}
	c := MustStart(b, "fsloop", dir)
	params := map[string]any{"sessionId": "s1", "path": "big.go"}
	if rep := fsLoop(b, c, 1, "fs/read_text_file", params); rep.Errors != 0 || rep.Sum != sum(text) {
		b.Fatalf("read: %d errors (%+v), %d bytes of content, want %d", rep.Errors, rep.First, rep.Len, len(text))
	}
	b.ReportAllocs()
	b.SetBytes(int64(len(text)))
	b.ResetTimer()
	rep := fsLoop(b, c, b.N, "fs/read_text_file", params)
	b.StopTimer()
	if rep.Errors != 0 {
		b.Fatalf("%d errors: %+v", rep.Errors, rep.First)
	}
	b.ReportMetric(float64(rep.Bytes)/float64(b.N), "answer-bytes/op")
}
