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
