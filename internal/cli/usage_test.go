package cli

import (
	"runtime/debug"
	"strings"
	"testing"
)

func TestEditDistance(t *testing.T) {
	for _, tt := range []struct {
		a, b string
		want int
	}{
		{"", "", 0},
		{"prompt", "prompt", 0},
		{"promt", "prompt", 1},
		{"porpmt", "prompt", 2},
		{"porm", "prompt", 3},
		{"serve", "sandbox", 6},
	} {
		if got := editDistance(tt.a, tt.b); got != tt.want {
			t.Errorf("editDistance(%q, %q) = %d, want %d", tt.a, tt.b, got, tt.want)
		}
	}
}

func TestBuildLine(t *testing.T) {
	for _, tt := range []struct {
		name string
		info *debug.BuildInfo
		want string
	}{
		{"NoInfo", nil, "sparkles (devel), commit unknown, "},
		{"Checkout", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, "sparkles (devel), commit unknown, "},
		{"Commit", &debug.BuildInfo{Main: debug.Module{Version: "v0.3.0"}, Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "ec33d39"}, {Key: "vcs.modified", Value: "true"}, {Key: "vcs.time", Value: "2026-12-01T09:26:00Z"},
		}}, "sparkles v0.3.0, commit ec33d39 (modified) of 2026-12-01T09:26:00Z, "},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := buildLine(tt.info); !strings.HasPrefix(got, tt.want) {
				t.Fatalf("buildLine = %q, want it to start %q", got, tt.want)
			}
		})
	}
}
