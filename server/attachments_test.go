package server

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/sparkles-dev/sparkles/sandbox"
)

func TestTurnInput(t *testing.T) {
	big := strings.Repeat("x", maxBodyBytes)
	for _, tc := range []struct {
		name   string
		raw    string
		text   string
		blocks int
		typ    string // the error's type, "" for none
	}{
		{"Text", `"hello"`, "hello", 0, ""},
		{"Blocks", `[{"type":"text","text":"hi"},{"type":"image","media_type":"image/png","data":"AA=="},{"type":"file","path":"a.txt"}]`, "", 3, ""},
		{"Missing", ``, "", 0, sandbox.EInvalidRequest},
		{"Null", `null`, "", 0, sandbox.EInvalidRequest},
		{"Blank", `"  "`, "", 0, sandbox.EInvalidRequest},
		{"Number", `42`, "", 0, sandbox.EInvalidRequest},
		{"EmptyList", `[]`, "", 0, sandbox.EInvalidRequest},
		{"UnknownField", `[{"type":"text","text":"hi","url":"x"}]`, "", 0, sandbox.EInvalidRequest},
		{"LargeText", `"` + big + `"`, "", 0, sandbox.EPayloadTooLarge},
		{"LargeTextBlock", `[{"type":"text","text":"` + big + `"}]`, "", 0, sandbox.EPayloadTooLarge},
		{"LargeImage", `[{"type":"image","media_type":"image/png","data":"` + big + `"}]`, "", 1, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			text, blocks, err := turnInput(json.RawMessage(tc.raw))
			if tc.typ != "" {
				if !sandbox.IsType(err, tc.typ) {
					t.Fatalf("err = %v, want %s", err, tc.typ)
				}
				return
			}
			if err != nil || text != tc.text || len(blocks) != tc.blocks {
				t.Fatalf("turnInput = %q, %d blocks, %v; want %q, %d blocks", text, len(blocks), err, tc.text, tc.blocks)
			}
		})
	}
}

func TestTurnBodyMax(t *testing.T) {
	s := &Server{cfg: Config{TurnImageMax: 3 << 20}}
	if got, want := s.turnBodyMax(), int64(maxBodyBytes+turnBodyImages*(4<<20)); got != want {
		t.Fatalf("turnBodyMax = %d, want %d", got, want)
	}
}
