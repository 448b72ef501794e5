package server

import (
	"bytes"
	"errors"
	"io"
	"math"
	"strconv"
	"strings"
	"testing"

	"github.com/sparkles-dev/sparkles/sandbox"
)

func FuzzParseCursor(f *testing.F) {
	for _, s := range append([]string{"0", "1", "42", "007", "18446744073709551615", "18446744073709551616", "99999999999999999999999"}, badCursors...) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, err := parseCursor(s)
		digits := s != "" && strings.Trim(s, "0123456789") == ""
		if digits != (err == nil) {
			t.Fatalf("parseCursor(%q) = %d, %v; valid = %v", s, v, err, digits)
		}
		if err != nil {
			if got, want := sandbox.ErrorType(err), sandbox.EInvalidCursor; got != want {
				t.Fatalf("parseCursor(%q) error type %q, want %q", s, got, want)
			}
			return
		}
		want := strings.TrimLeft(s, "0")
		if want == "" {
			want = "0"
		}
		// Beyond 64 bits, the largest id: beyond every log, so stale.
		if _, err := strconv.ParseUint(s, 10, 64); err != nil {
			want = strconv.FormatUint(math.MaxUint64, 10)
		}
		if got := strconv.FormatUint(v, 10); got != want {
			t.Fatalf("parseCursor(%q) = %s", s, got)
		}
	})
}

func FuzzWriteFrame(f *testing.F) {
	f.Add(uint64(1), "message.updated", []byte(`{"id":"1"}`))
	f.Add(uint64(0), "snapshot", []byte("a\nb\r\nc\rd"))
	f.Add(uint64(7), "x\ny", []byte(""))
	f.Add(uint64(9), ": x", []byte("\n\n"))
	f.Fuzz(func(t *testing.T, id uint64, event string, data []byte) {
		var buf bytes.Buffer
		rec := sandbox.Record{ID: id, Type: sandbox.Type(event), JSON: data}
		if err := WriteFrame(&buf, rec); err != nil {
			t.Fatal(err)
		}
		p := newSSEParser(&buf)
		fr, err := p.next()
		if err != nil {
			t.Fatalf("frame %q does not parse: %v", buf.String(), err)
		}
		if fr.isNote {
			t.Fatalf("frame %q parses as a comment", buf.String())
		}
		if got, want := fr.hasID, id != 0; got != want {
			t.Fatalf("has id line = %v, want %v", got, want)
		}
		if id != 0 && fr.id != strconv.FormatUint(id, 10) {
			t.Fatalf("id %q, want %d", fr.id, id)
		}
		if got, want := fr.event, strings.NewReplacer("\r", "", "\n", "").Replace(event); got != want {
			t.Fatalf("event %q, want %q", got, want)
		}
		wantData := strings.ReplaceAll(strings.ReplaceAll(string(data), "\r\n", "\n"), "\r", "\n")
		if got := fr.data; got != wantData {
			t.Fatalf("data %q, want %q", got, wantData)
		}
		if _, err := p.next(); !errors.Is(err, io.EOF) {
			t.Fatalf("more than one frame in %q", buf.String())
		}
	})
}
