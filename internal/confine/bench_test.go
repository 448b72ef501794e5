//go:build linux

package confine_test

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sparkles-dev/sparkles/internal/agent"
	"github.com/sparkles-dev/sparkles/internal/confine"
)

// BenchmarkDemoBoot measures what confinement adds to an agent's boot: the
// demo agent as a process (this test binary, as `sparkles agent demo` is
// the sparkles binary), from agent.Start to an open ACP session
// (initialize, session/new), without and with the launcher (network open,
// through pasta where it is installed, and none). Stopping the agent is
// not timed.
func BenchmarkDemoBoot(b *testing.B) {
	exe, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	for _, mode := range []string{"unconfined", "confined", "confined-none"} {
		b.Run(mode, func(b *testing.B) {
			base := varTmp(b)
			cfg := agent.Config{
				Command: []string{exe},
				Env:     []string{demoVar + "=1", "PATH=/usr/bin:/bin"},
				Logger:  slog.New(slog.DiscardHandler),
			}
			if mode != "unconfined" {
				data := filepath.Join(base, "data")
				os.Mkdir(data, 0o700)
				opts := confine.Options{DataDir: data}
				if mode == "confined-none" {
					opts.Network = confine.NetworkNone
				}
				cfg.Launcher = newLauncher(b, opts)
			}
			for i := 0; b.Loop(); i++ {
				b.StopTimer()
				cfg.Sandbox = sandboxDir(b, base, "c_"+time.Now().Format("150405.000000000"))
				cfg.Dir = filepath.Join(cfg.Sandbox, "work")
				ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
				b.StartTimer()
				c, err := agent.Start(ctx, cfg)
				b.StopTimer()
				cancel()
				if err != nil {
					b.Fatal(err)
				}
				c.Close()
				<-c.Done()
				b.StartTimer()
			}
		})
	}
}
