package bench

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/sparkles-dev/sparkles/internal/datadir"
)

// runCrashStart measures how long a server takes to start on a large data
// dir that a crash left: 2,000 sandboxes of 1,000 events each (about 1.3
// GB of file), written by a child server that is then killed (kill -9)
// without closing the file, so that the next open finds the file as the
// last commit left it and the WAL unmaterialized. The start is timed from
// the start of the process to the first /healthz answer, with the file in
// the page cache as right after a crash, and again with the page cache
// dropped when the bench runs as root. The store writes bbolt's free-page
// list at commits while it is short (boltstore/doc.go, The file under the
// store); without it the open checks and bbolt scans every page, and the
// whole file is resident after the start.
func runCrashStart(ctx context.Context, r *runner) error {
	restore, err := r.coldBinary()
	if err != nil {
		return err
	}
	defer restore()
	sandboxes, events := pick(r, 2000, 20), pick(r, 1000, 50)
	dir, cleanup, err := r.tempDir()
	if err != nil {
		return err
	}
	defer cleanup()
	r.logf("building a data dir of %d sandboxes x %d events, then killing its server", sandboxes, events)
	c, err := startChild(ctx, r.cfg.ChildCommand, dir)
	if err != nil {
		return err
	}
	_, err = c.do(ctx, childRequest{Op: "create", N: sandboxes, Fill: events, Size: coldEventSize})
	_ = c.cmd.Process.Kill()
	c.close()
	if err != nil {
		return err
	}
	fi, err := os.Stat(datadir.Dir(dir).Store())
	if err != nil {
		return err
	}
	what := fmt.Sprintf("%d sandboxes x %d events of %d-byte text, a %.0f MiB file left by a server killed (kill -9) after its last write", sandboxes, events, coldEventSize, mib(fi.Size()))
	server := "the bench's child server"
	if len(r.cfg.ServeCommand) > 0 {
		server = "sparkles serve"
	}
	measure := func(name, cond string, cold bool) error {
		if cold {
			if err := dropCaches(); err != nil {
				return err
			}
		}
		s, err := r.timedStart(ctx, dir)
		if err != nil {
			return err
		}
		r.add(Figure{Name: name, Value: ms(s.took), Unit: "ms",
			Conditions: fmt.Sprintf("%s, from the start of the process to the first /healthz answer; %s; %s", server, what, cond),
			Target:     "<= 2 s", Met: atLeast(ms(2*time.Second), ms(s.took))})
		r.add(Figure{Name: "RSS after a " + name, Value: mib(s.mem.RSS), Unit: "MiB",
			Conditions: fmt.Sprintf("VmRSS at the first /healthz answer: %.1f MiB anonymous, %.1f MiB of mapped files (RssFile), %.1f MiB of them the store file's mapping (smaps); %.1f KiB per sandbox",
				mib(s.mem.Anon), mib(s.mem.File), mib(s.dbRSS), float64(s.mem.RSS)/1024/float64(sandboxes))})
		s.stop()
		return nil
	}
	if err := measure("start after a crash", "the file in the page cache, as right after the crash", false); err != nil {
		return err
	}
	if !canDropCaches() {
		r.logf("not root: the page cache cannot be dropped, so the cold start after a crash is skipped")
		return nil
	}
	// The timed server stopped cleanly: a write and a kill leave the file
	// as a crash does again.
	c, err = startChild(ctx, r.cfg.ChildCommand, dir)
	if err != nil {
		return err
	}
	_, err = c.do(ctx, childRequest{Op: "create", N: 1})
	_ = c.cmd.Process.Kill()
	c.close()
	if err != nil {
		return err
	}
	return measure("cold start after a crash", "page cache dropped first", true)
}
