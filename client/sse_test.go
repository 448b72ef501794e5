package client

import (
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"
	"time"
)

func readAll(t *testing.T, r io.Reader, max int) ([]sseEvent, error) {
	t.Helper()
	p := newSSEReader(r, max)
	var out []sseEvent
	for {
		ev, err := p.Next()
		if err != nil {
			return out, err
		}
		out = append(out, ev)
	}
}

func TestSSEReader(t *testing.T) {
	tests := []struct {
		name  string
		input string
		want  []sseEvent
	}{
		{"OK", "id: 1\nevent: turn.started\ndata: {\"a\":1}\n\n",
			[]sseEvent{{ID: "1", HasID: true, Type: "turn.started", Data: []byte(`{"a":1}`)}}},
		{"DefaultType", "data: x\n\n", []sseEvent{{Type: "message", Data: []byte("x")}}},
		{"MultiLineData", "data: a\ndata:b\ndata:  c\n\n", []sseEvent{{Type: "message", Data: []byte("a\nb\n c")}}},
		{"CRLF", "id: 7\r\nevent: e\r\ndata: x\r\n\r\n", []sseEvent{{ID: "7", HasID: true, Type: "e", Data: []byte("x")}}},
		{"CR", "id: 7\revent: e\rdata: x\r\r", []sseEvent{{ID: "7", HasID: true, Type: "e", Data: []byte("x")}}},
		{"MixedEndings", "data: a\r\ndata: b\rdata: c\n\r\n", []sseEvent{{Type: "message", Data: []byte("a\nb\nc")}}},
		{"Comments", ": ping\n\n: hello\ndata: x\n: between\n\n", []sseEvent{{Type: "message", Data: []byte("x")}}},
		{"NoColon", "data\n\ndata\ndata\n\n", []sseEvent{{Type: "message", Data: []byte("")}, {Type: "message", Data: []byte("\n")}}},
		{"NoData", "event: x\nid: 3\n\ndata: y\n\n", []sseEvent{{ID: "3", Type: "message", Data: []byte("y")}}},
		{"IDInherited", "id: 5\ndata: a\n\nevent: snapshot\ndata: b\n\n",
			[]sseEvent{{ID: "5", HasID: true, Type: "message", Data: []byte("a")}, {ID: "5", Type: "snapshot", Data: []byte("b")}}},
		{"IDWithNull", "id: 1\ndata: a\n\nid: 2\x003\ndata: b\n\n",
			[]sseEvent{{ID: "1", HasID: true, Type: "message", Data: []byte("a")}, {ID: "1", Type: "message", Data: []byte("b")}}},
		{"EmptyID", "id: 1\ndata: a\n\nid\ndata: b\n\n",
			[]sseEvent{{ID: "1", HasID: true, Type: "message", Data: []byte("a")}, {ID: "", HasID: true, Type: "message", Data: []byte("b")}}},
		{"UnknownField", "foo: bar\ndata: x\n\n", []sseEvent{{Type: "message", Data: []byte("x")}}},
		{"BOM", "\xEF\xBB\xBFdata: x\n\n", []sseEvent{{Type: "message", Data: []byte("x")}}},
		{"ColonInValue", "data: a: b\n\n", []sseEvent{{Type: "message", Data: []byte("a: b")}}},
		{"IncompleteAtEOF", "data: a\n\ndata: b\n", []sseEvent{{Type: "message", Data: []byte("a")}}},
		{"IncompleteLineAtEOF", "data: a\n\ndata: b", []sseEvent{{Type: "message", Data: []byte("a")}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Byte by byte too, so that line endings split across reads
			// (a CR in one read, its LF in the next) are covered.
			for _, r := range []io.Reader{strings.NewReader(tt.input), iotest.OneByteReader(strings.NewReader(tt.input))} {
				got, err := readAll(t, r, 1<<20)
				if !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
					t.Fatalf("err = %v, want EOF", err)
				}
				if len(got) != len(tt.want) {
					t.Fatalf("got %d events %+v, want %d %+v", len(got), got, len(tt.want), tt.want)
				}
				for i := range got {
					g, w := got[i], tt.want[i]
					if g.ID != w.ID || g.HasID != w.HasID || g.Type != w.Type || string(g.Data) != string(w.Data) {
						t.Fatalf("event %d = %+v (data %q), want %+v (data %q)", i, g, g.Data, w, w.Data)
					}
				}
			}
		})
	}
}

func TestSSEReaderRetry(t *testing.T) {
	p := newSSEReader(strings.NewReader("retry: 2500\ndata: x\n\nretry: 1x\ndata: y\n\n"), 1<<10)
	if _, err := p.Next(); err != nil {
		t.Fatal(err)
	}
	if got, want := p.retry, 2500*time.Millisecond; got != want {
		t.Fatalf("retry = %v, want %v", got, want)
	}
	if _, err := p.Next(); err != nil {
		t.Fatal(err)
	}
	if got, want := p.retry, 2500*time.Millisecond; got != want {
		t.Fatalf("retry after an invalid field = %v, want %v", got, want)
	}
}

// A line ending in CR is dispatched without waiting for the next byte: a
// server that ends lines in CR alone must not be held back by one event.
func TestSSEReaderCRDoesNotBlock(t *testing.T) {
	pr, pw := io.Pipe()
	defer pw.Close()
	p := newSSEReader(pr, 1<<10)
	got := make(chan sseEvent, 1)
	go func() {
		ev, err := p.Next()
		if err == nil {
			got <- ev
		}
	}()
	if _, err := io.WriteString(pw, "data: x\r\r"); err != nil {
		t.Fatal(err)
	}
	select {
	case ev := <-got:
		if got, want := string(ev.Data), "x"; got != want {
			t.Fatalf("data = %q, want %q", got, want)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("event ending in CR was not dispatched")
	}
}

func TestSSEReaderLimit(t *testing.T) {
	t.Run("Line", func(t *testing.T) {
		_, err := readAll(t, strings.NewReader("data: "+strings.Repeat("x", 100)+"\n\n"), 64)
		if !errors.Is(err, errEventTooLarge) {
			t.Fatalf("err = %v, want errEventTooLarge", err)
		}
	})
	t.Run("Event", func(t *testing.T) {
		_, err := readAll(t, strings.NewReader(strings.Repeat("data: xxxxxxxxxx\n", 10)+"\n"), 64)
		if !errors.Is(err, errEventTooLarge) {
			t.Fatalf("err = %v, want errEventTooLarge", err)
		}
	})
}

func FuzzSSEReader(f *testing.F) {
	f.Add([]byte("id: 1\nevent: a\ndata: b\n\n"))
	f.Add([]byte("data: a\r\ndata: b\r\r: c\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		p := newSSEReader(iotest.HalfReader(strings.NewReader(string(b))), 1<<10)
		for i := 0; ; i++ {
			ev, err := p.Next()
			if err != nil {
				return
			}
			if ev.Type == "" {
				t.Fatal("dispatched an event without a type")
			}
			if i > len(b) {
				t.Fatal("more events than input bytes")
			}
		}
	})
}

// BenchmarkSSEReader parses frames the size of typical message.updated
// events, as a stream replaying a long log delivers them.
func BenchmarkSSEReader(b *testing.B) {
	frame := "id: 1042\nevent: message.updated\ndata: {\"id\":\"1042\",\"data\":{\"text\":\"" + strings.Repeat("word ", 100) + "\"}}\n\n"
	input := strings.Repeat(frame, 1000)
	b.SetBytes(int64(len(input)))
	b.ReportAllocs()
	for b.Loop() {
		p := newSSEReader(strings.NewReader(input), 1<<20)
		for {
			if _, err := p.Next(); err != nil {
				break
			}
		}
	}
}
