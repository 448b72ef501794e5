package cli

import (
	"context"
	"log/slog"
	"testing"
)

// TestLogFlags: --log-format and --log-level choose the handler and its
// level (TestLogFlagsRefused runs serve with other values).
func TestLogFlags(t *testing.T) {
	l, err := newLogger("text", "warn")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := l.Handler().(*slog.TextHandler); !ok {
		t.Errorf("--log-format text: handler %T", l.Handler())
	}
	if l.Enabled(context.Background(), slog.LevelInfo) || !l.Enabled(context.Background(), slog.LevelWarn) {
		t.Error("--log-level warn: info enabled or warn not")
	}
	l, err = newLogger("json", "debug")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := l.Handler().(*slog.JSONHandler); !ok {
		t.Errorf("--log-format json: handler %T", l.Handler())
	}
	if !l.Enabled(context.Background(), slog.LevelDebug) {
		t.Error("--log-level debug: debug not enabled")
	}
}

// TestFormatSize: the defaults of the size flags read back as they were
// written, in the largest unit that divides them.
func TestFormatSize(t *testing.T) {
	for _, tc := range []struct {
		n    int64
		want string
	}{{256 << 20, "256M"}, {4 << 30, "4G"}, {1536 << 20, "1536M"}, {3 << 10, "3K"}, {1000, "1000"}} {
		got := formatSize(tc.n)
		if got != tc.want {
			t.Errorf("formatSize(%d) = %q, want %q", tc.n, got, tc.want)
		}
		if back, err := parseSize(got); err != nil || back != tc.n {
			t.Errorf("parseSize(%q) = %d, %v, want %d", got, back, err, tc.n)
		}
	}
}
