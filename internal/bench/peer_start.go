package bench

import (
	"context"
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/sparkles-dev/sparkles/internal/datadir"
)

// peerStart measures how long each server takes to start on a store of
// peerLogEvents events, from the exec of its process to its first answer
// of /healthz: Sparkles on one sandbox whose agent announced that many
// tool calls in one turn, Mercure on the topic peerLog filled (mercureDB),
// with events of about the same size. The starts alternate, each with the
// page cache dropped first where the bench may (root); the figures are
// the medians.
func peerStart(ctx context.Context, r *runner, mercureDB string) error {
	n := int64(peerLogEvents(r))
	dir, cleanup, err := r.tempDir()
	if err != nil {
		return err
	}
	defer cleanup()
	r.logf("sparkles: an agent announcing %d tool calls in one turn", n)
	size, err := fillLongTurn(ctx, r, dir, n)
	if err != nil {
		return err
	}
	sFile, err := fileSize(datadir.Dir(dir).Store())
	if err != nil {
		return err
	}
	mFile, err := fileSize(mercureDB)
	if err != nil {
		return err
	}
	cold := canDropCaches()
	if !cold {
		r.logf("not root: the page cache cannot be dropped, so the starts are warm")
	}
	restore, err := r.coldBinary()
	if err != nil {
		return err
	}
	defer restore()
	hub, hubDir := r.cfg.MercureHub, ""
	if hub == "" {
		r.logf("no --mercure-hub: the start of the Mercure hub as shipped (internal/bench/mercurehub) is not measured")
	} else {
		var cleanup func()
		if hubDir, cleanup, err = r.tempDir(); err != nil {
			return err
		}
		defer cleanup()
	}
	var sTook, sReady, mTook, hTook, sFloor, mFloor []time.Duration
	var sMem, mMem, hMem procMem
	// Each round starts every server once, then runs each binary once to
	// its exit, each from a dropped page cache.
	drop := func() error {
		if cold {
			return dropCaches()
		}
		return nil
	}
	for range pick(r, 15, 1) {
		if err := drop(); err != nil {
			return err
		}
		s, err := r.timedStart(ctx, dir)
		if err != nil {
			return fmt.Errorf("sparkles: %w", err)
		}
		s.stop()
		sTook, sReady, sMem = append(sTook, s.took), append(sReady, s.ready), s.mem
		if err := drop(); err != nil {
			return err
		}
		took, mem, err := timedPeerStart(ctx, r.cfg.PeerMercure, mercureDB)
		if err != nil {
			return fmt.Errorf("mercure: %w", err)
		}
		mTook, mMem = append(mTook, took), mem
		if hub != "" {
			if err := drop(); err != nil {
				return err
			}
			took, mem, err := timedHubStart(ctx, hub, mercureDB, hubDir)
			if err != nil {
				return fmt.Errorf("the Mercure hub: %w", err)
			}
			hTook, hMem = append(hTook, took), mem
		}
		if len(r.cfg.ServeCommand) > 0 {
			if err := drop(); err != nil {
				return err
			}
			took, err := timedExit(ctx, []string{r.cfg.ServeCommand[0], "version"})
			if err != nil {
				return err
			}
			sFloor = append(sFloor, took)
			if err := drop(); err != nil {
				return err
			}
			if took, err = timedExit(ctx, []string{r.cfg.PeerMercure, "-h"}); err != nil {
				return err
			}
			mFloor = append(mFloor, took)
		}
	}
	name, how := "cold start", "page cache dropped before each start"
	if !cold {
		name, how = "warm start", "the files in the page cache: the bench is not root and cannot drop it"
	}
	server := "the bench's child server"
	if len(r.cfg.ServeCommand) > 0 {
		server = "sparkles serve"
	}
	sCond := fmt.Sprintf("%s on one sandbox whose agent process announced %s tool calls in one turn (events of %d bytes of data), then stopped cleanly: a %.1f MiB file; VmRSS %.1f MiB at the answer%s",
		server, thousands(n), size, mib(sFile), mib(sMem.RSS), readyNote(&started{took: medianDuration(sTook), ready: medianDuration(sReady)}))
	r.addPair(pair{name: fmt.Sprintf("%s on %s events", name, thousands(n)), unit: "ms",
		sparkles: ms(medianDuration(sTook)), mercure: ms(medianDuration(mTook)),
		cond:  fmt.Sprintf("from the exec of the server's process to its first /healthz answer; %s; starts alternating, median of %d each; %s", how, len(sTook), spreadNote(sTook, mTook)),
		sCond: sCond,
		mCond: fmt.Sprintf("mercure-peer, the hub's library alone behind a plain HTTP server, on the bolt file of the replay above: one topic of %s updates, a %.1f MiB file; VmRSS %.1f MiB at the answer; its bound is each binary's own start (the floor below)",
			thousands(n), mib(mFile), mib(mMem.RSS)),
	})
	if hub != "" {
		// What the issue of this figure measured Mercure by: the hub a
		// user of Mercure starts, on the same file.
		p := pair{name: fmt.Sprintf("%s on %s events, against the Mercure hub as shipped", name, thousands(n)), unit: "ms",
			sparkles: ms(medianDuration(sTook)), mercure: ms(medianDuration(hTook)), sparklesShown: true,
			cond:  fmt.Sprintf("from the exec of the server's process to its first /healthz answer; %s; starts alternating, median of %d each; %s", how, len(sTook), spreadNote(sTook, hTook)),
			mCond: fmt.Sprintf("the Mercure hub as shipped (Caddy with the Mercure module, `mercure run` with a Caddyfile: the hub's site with its bolt transport on the same file as mercure-peer's, the admin endpoint, the saved configuration and automatic HTTPS off); VmRSS %.1f MiB at the answer", mib(hMem.RSS)),
		}
		if cold {
			p.target = 1 // Sparkles no slower than Mercure
		}
		r.addPair(p)
	}
	if len(sFloor) > 0 {
		r.addPair(pair{name: fmt.Sprintf("%s of the binary alone, to its exit (floor)", name), unit: "ms",
			sparkles: ms(medianDuration(sFloor)), mercure: ms(medianDuration(mFloor)),
			cond:  fmt.Sprintf("from the exec to the exit; %s; in the same rounds as the starts, median of %d each; %s", how, len(sFloor), spreadNote(sFloor, mFloor)),
			sCond: "sparkles version", mCond: "mercure-peer -h",
		})
	}
	return nil
}

// fillLongTurn fills a store in dir with one sandbox whose agent process
// announces n tool calls, a new one with every update, in one turn, then
// cancels the turn and stops the server cleanly. It returns the events'
// mean size of data.
func fillLongTurn(ctx context.Context, r *runner, dir string, n int64) (int64, error) {
	c, err := r.startChild(ctx, dir, EnvChildAgent+"=flood")
	if err != nil {
		return 0, err
	}
	defer c.close()
	created, err := c.do(ctx, childRequest{Op: "create", N: 1})
	if err != nil {
		return 0, err
	}
	sub, err := subscribe(ctx, c.addr, c.token, created.IDs[0], -1)
	if err != nil {
		return 0, err
	}
	defer sub.close()
	if _, err := c.do(ctx, childRequest{Op: "floodnew", IDs: created.IDs}); err != nil {
		return 0, err
	}
	if err := waitEvents(ctx, sub, n); err != nil {
		return 0, err
	}
	if _, err := c.do(ctx, childRequest{Op: "unflood"}); err != nil {
		return 0, err
	}
	return sub.bytes.Load() / max(sub.count.Load(), 1), nil
}

// timedPeerStart starts mercure-peer on db and times it to its first
// /healthz answer; it stops it before it returns.
func timedPeerStart(ctx context.Context, path, db string) (time.Duration, procMem, error) {
	start := time.Now()
	p, err := startPeer(ctx, path, db)
	if err != nil {
		return 0, procMem{}, err
	}
	defer p.close()
	if err := healthz(ctx, p.addr); err != nil {
		return 0, procMem{}, err
	}
	took := time.Since(start)
	mem, err := readProcMem(p.cmd.Process.Pid)
	return took, mem, err
}

func fileSize(path string) (int64, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return 0, err
	}
	return fi.Size(), nil
}

// spreadNote says how far apart the starts of each server were (the
// middle half of them) and the median of the rounds' own ratios, each
// from two starts taken one after the other: on a machine whose speed
// drifts, the ratio of the medians alone can mislead either way.
func spreadNote(s, m []time.Duration) string {
	if len(s) < 4 || len(s) != len(m) {
		return "too few starts for their spread"
	}
	ratios := make([]float64, len(s))
	for i := range s {
		ratios[i] = float64(s[i]) / float64(m[i])
	}
	slices.Sort(ratios)
	s1, s3 := quartiles(s)
	m1, m3 := quartiles(m)
	return fmt.Sprintf("the middle half of the starts: Sparkles %.1f–%.1f ms, Mercure %.1f–%.1f ms; the median of the rounds' ratios %.2f x",
		ms(s1), ms(s3), ms(m1), ms(m3), ratios[len(ratios)/2])
}

// quartiles are the first and third quartiles of ds (nearest rank).
func quartiles(ds []time.Duration) (time.Duration, time.Duration) {
	s := slices.Sorted(slices.Values(ds))
	return s[len(s)/4], s[(3*len(s))/4]
}

// medianDuration is the median of ds, the upper one of an even count.
func medianDuration(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(ds))
	return s[len(s)/2]
}
