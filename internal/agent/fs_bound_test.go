package agent

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// allocSlack is what the test process may allocate around one fs request
// beyond the request's own cost: the prompt, the agent's report, the
// chunk buffer of a read.
const allocSlack = 1 << 20

// allocated returns the bytes the process allocated while f ran. The agents
// are processes of their own, so this is the server side alone.
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// nulFile makes a file of size NUL bytes: each one is six bytes in JSON.
// It is sparse, as an agent would make it: nothing is written.
func nulFile(t testing.TB, dir, name string, size int64) {
	t.Helper()
	f, err := os.Create(filepath.Join(dir, name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
}

// atLimit is the size of a NUL file whose answer to fsloop just fits.
func atLimit() int64 {
	overhead := len(answerHead) + len(`"fs"`) + len(answerMid) + len(answerTail)
	return int64(MaxFSMessage-overhead) / 6
}

// nulAnswer is the hash of the answer line to fsloop's read of n NUL bytes.
func nulAnswer(n int64) string {
	return sum(answerHead + `"fs"` + answerMid + strings.Repeat(`\u0000`, int(n)) + answerTail)
}

func readParamsFor(path string, lineLimit ...int) map[string]any {
	p := map[string]any{"sessionId": "s1", "path": path}
	if len(lineLimit) == 2 {
		p["line"], p["limit"] = lineLimit[0], lineLimit[1]
	}
	return p
}

// TestFSReadCost reads a 16 MiB file of NUL bytes: an answer would take
// 96 MiB of JSON, so it is refused, naming the limit and the file's size,
// and the refusal costs the server almost nothing, whether the file is
// asked for whole or from a line on (which reads it). A file whose answer
// just fits costs its answer and no more.
func TestFSReadCost(t *testing.T) {
	dir := t.TempDir()
	nulFile(t, dir, "nul16", 16<<20)
	nulFile(t, dir, "fits", atLimit())
	c := MustStart(t, "fsloop", dir)

	for _, tc := range []struct {
		name   string
		params map[string]any
	}{
		{"Whole", readParamsFor("nul16")},
		{"OneLine", readParamsFor("nul16", 1, 1)},
	} {
		t.Run("Refused"+tc.name, func(t *testing.T) {
			var rep fsLoopReport
			n := allocated(func() { rep = fsLoop(t, c, 1, "fs/read_text_file", tc.params) })
			t.Logf("refused with %d bytes allocated", n)
			if rep.Errors != 1 || rep.First.Code != codeInvalidParams {
				t.Fatalf("answer: %+v, want an invalid params error", rep)
			}
			for _, want := range []string{"8 MiB", "16777216 bytes", "nul16"} {
				if !strings.Contains(rep.First.Message, want) {
					t.Errorf("error %q does not say %q", rep.First.Message, want)
				}
			}
			if n > allocSlack {
				t.Fatalf("refusing the read allocated %d bytes, want at most %d", n, allocSlack)
			}
		})
	}
	t.Run("AtLimit", func(t *testing.T) {
		want := nulAnswer(atLimit())
		var rep fsLoopReport
		n := allocated(func() { rep = fsLoop(t, c, 1, "fs/read_text_file", readParamsFor("fits")) })
		t.Logf("an answer of %d bytes with %d bytes allocated", rep.Bytes, n)
		if rep.Errors != 0 {
			t.Fatalf("read refused: %+v", rep.First)
		}
		if rep.LineSum != want {
			t.Fatalf("answer of %d bytes is not %d NUL bytes", rep.Bytes, atLimit())
		}
		if rep.Bytes > MaxFSMessage {
			t.Fatalf("answer of %d bytes, over the limit of %d", rep.Bytes, MaxFSMessage)
		}
		if max := uint64(rep.Bytes) + allocSlack; n > max {
			t.Fatalf("an answer of %d bytes allocated %d, want at most %d", rep.Bytes, n, max)
		}
	})
	t.Run("OneByteMore", func(t *testing.T) {
		nulFile(t, dir, "over", atLimit()+1)
		rep := fsLoop(t, c, 1, "fs/read_text_file", readParamsFor("over"))
		if rep.Errors != 1 || rep.First.Code != codeInvalidParams {
			t.Fatalf("answer: %+v, want an invalid params error", rep)
		}
	})
}

// TestFSReadSharedBound has eight agents read at once: first the 16 MiB NUL
// file, which every one is refused at almost no cost, then a file whose
// answer takes 8 MiB, with a budget of 16 MiB shared by all eight. Every
// read is answered in full, and the bytes held at once never pass the
// budget: the reads beyond it waited for it.
func TestFSReadSharedBound(t *testing.T) {
	dir := t.TempDir()
	nulFile(t, dir, "nul16", 16<<20)
	nulFile(t, dir, "fits", atLimit())
	budget := NewFSBudget(MinFSBudget)
	var conns []*Conn
	for range 8 {
		conns = append(conns, MustStart(t, "fsloop", dir, func(cfg *Config) { cfg.FSBudget = budget }))
	}
	all := func(path string) []fsLoopReport {
		reps := make([]fsLoopReport, len(conns))
		var wg sync.WaitGroup
		for i, c := range conns {
			wg.Go(func() { reps[i] = fsLoop(t, c, 1, "fs/read_text_file", readParamsFor(path)) })
		}
		wg.Wait()
		return reps
	}

	want := nulAnswer(atLimit())
	var reps []fsLoopReport
	n := allocated(func() { reps = all("nul16") })
	t.Logf("8 reads refused with %d bytes allocated", n)
	for i, rep := range reps {
		if rep.Errors != 1 || rep.First.Code != codeInvalidParams {
			t.Fatalf("agent %d: %+v, want an invalid params error", i, rep)
		}
	}
	if max := uint64(len(conns)) * allocSlack; n > max {
		t.Fatalf("refusing 8 reads allocated %d bytes, want at most %d", n, max)
	}

	n = allocated(func() { reps = all("fits") })
	t.Logf("8 answers with %d bytes allocated", n)
	var answers uint64
	for i, rep := range reps {
		if rep.Errors != 0 || rep.LineSum != want {
			t.Fatalf("agent %d: %d errors (%+v), an answer of %d bytes that is not %d NUL bytes", i, rep.Errors, rep.First, rep.Bytes, atLimit())
		}
		answers += uint64(rep.Bytes)
	}
	if max := answers + uint64(len(conns))*allocSlack; n > max {
		t.Fatalf("8 answers of %d bytes in all allocated %d, want at most %d", answers, n, max)
	}
	budget.mu.Lock()
	peak, held := budget.peak, budget.held
	budget.mu.Unlock()
	t.Logf("at most %d bytes held at once, of a budget of %d", peak, budget.Size())
	if peak > budget.Size() || peak < reps[0].Bytes {
		t.Fatalf("at most %d bytes held at once, want between one answer (%d) and the budget (%d)", peak, reps[0].Bytes, budget.Size())
	}
	if held != 0 {
		t.Fatalf("%d bytes still held after every answer", held)
	}
}

// TestFSBusy holds the whole budget: a read waits for it as long as a write
// to the agent may stall, then is answered that the server is busy; once the
// budget is free, the same read succeeds.
func TestFSBusy(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "a.txt", "hello\n")
	budget := NewFSBudget(MinFSBudget)
	c := MustStart(t, "fsloop", dir, func(cfg *Config) {
		cfg.FSBudget = budget
		cfg.StallTimeout = 100 * time.Millisecond
	})
	if err := budget.acquire(context.Background(), budget.Size()); err != nil {
		t.Fatal(err)
	}
	rep := fsLoop(t, c, 1, "fs/read_text_file", readParamsFor("a.txt"))
	if rep.Errors != 1 || rep.First.Code != codeInternal || !strings.Contains(rep.First.Message, "busy") {
		t.Fatalf("answer with the budget spent: %+v, want a busy error", rep)
	}
	if want := fmt.Sprintf("%d MiB", MinFSBudget>>20); !strings.Contains(rep.First.Message, want) {
		t.Errorf("error %q does not name the budget, %s", rep.First.Message, want)
	}
	budget.release(budget.Size())
	if rep := fsLoop(t, c, 1, "fs/read_text_file", readParamsFor("a.txt")); rep.Errors != 0 || rep.Sum != sum("hello\n") {
		t.Fatalf("answer with the budget free: %+v", rep)
	}
}

// TestFSWriteCost writes through fs/write_text_file: a file near the limit
// is written exactly, at the cost of reading its line, one copy of the
// params and the content; a request over the limit is refused before its
// content is decoded, and nothing is written.
func TestFSWriteCost(t *testing.T) {
	dir := t.TempDir()
	c := MustStart(t, "fsloop", dir)
	unit := sourceText(1 << 10)
	write := func(name string, repeat int) (fsLoopReport, uint64) {
		var rep fsLoopReport
		n := allocated(func() {
			rep = fsLoopSpecified(t, c, fsLoopSpec{N: 1, Method: "fs/write_text_file", Fill: unit, Repeat: repeat,
				Params: map[string]any{"sessionId": "s1", "path": name}})
		})
		return rep, n
	}

	// Quoted, this text takes about 1.1 times its size: 0.8 of the limit
	// fits.
	repeat := MaxFSMessage * 8 / 10 / len(unit)
	rep, n := write("big.go", repeat)
	t.Logf("a write of %d bytes with %d bytes allocated", repeat*len(unit), n)
	if rep.Errors != 0 {
		t.Fatalf("write refused: %+v", rep.First)
	}
	b, err := os.ReadFile(filepath.Join(dir, "big.go"))
	if err != nil || string(b) != strings.Repeat(unit, repeat) {
		t.Fatalf("written file: %d bytes, %v; want %d bytes of the text", len(b), err, repeat*len(unit))
	}
	// The line reader grows its buffer by doubling up to 8 MiB (16 MiB in
	// all, for a line of 7.4), the params are copied out of it, and the
	// content is decoded once: encoding/json decoded it twice.
	if max := uint64(2*MaxFSMessage+2*quotedSize(b)) + allocSlack; n > max {
		t.Fatalf("writing %d bytes allocated %d, want at most %d", len(b), n, max)
	}

	rep, _ = write("over.go", MaxFSMessage/len(unit))
	if rep.Errors != 1 || rep.First.Code != codeInvalidParams || !strings.Contains(rep.First.Message, "8 MiB") {
		t.Fatalf("answer: %+v, want an invalid params error naming the limit", rep)
	}
	if _, err := os.Stat(filepath.Join(dir, "over.go")); !os.IsNotExist(err) {
		t.Fatalf("refused write left a file: %v", err)
	}
}
