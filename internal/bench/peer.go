package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// The peer scenario's outline: its parts in order, and how each reports a
// quantity measured on both servers (pair). The parts on running servers
// are in peer_live.go, those on a store of 100,000 events in peer_log.go and
// peer_start.go, the Mercure side in peer_mercure.go.

// runPeer measures Sparkles and Mercure (a hub of github.com/dunglas/mercure
// with its bolt transport, Config.PeerMercure) side by side, in one run on
// one machine: each part measures Sparkles, then Mercure, under the same
// load, and reports both values and their ratio, sparkles/mercure. Both
// servers run as child processes of the bench, whose client drives them
// alike: the same SSE reader, the same payload sizes. Last, each starts
// on a store of 100,000 events (peerStart).
func runPeer(ctx context.Context, r *runner) error {
	if err := peerBinary(r); err != nil {
		return err
	}
	if lim := raiseFileLimit(1 << 16); lim < 8192 {
		return fmt.Errorf("the open-file limit is %d; the peer scenario's connections need 8192 (ulimit -n)", lim)
	}
	// Mercure commits each publish in a bbolt transaction of its own, so
	// the disk's sync time bounds its durable rate: say what it was.
	disk, err := measureSync(r, pick(r, 500, 20))
	if err != nil {
		return err
	}
	r.add(Figure{Name: "disk: fdatasync p50", Value: ms(disk.quantile(0.5)), Unit: "ms",
		Conditions: fmt.Sprintf("%d appends of 4 KiB to a file in the stores' directory, each followed by fdatasync, before the parts; p99 %.2f ms", disk.n, ms(disk.quantile(0.99)))})
	producers := pick(r, []int{1, 16, 256}, []int{1, 4})
	for i, n := range producers {
		if err := peerProducers(ctx, r, n, i == len(producers)-1 && !r.cfg.Short); err != nil {
			return fmt.Errorf("%s: %w", plural(n, "producer"), err)
		}
	}
	for _, rate := range pick(r, []float64{20, 200}, []float64{50}) {
		if err := peerFanout(ctx, r, rate); err != nil {
			return fmt.Errorf("fan-out at %.0f events/s: %w", rate, err)
		}
	}
	if err := peerIdle(ctx, r); err != nil {
		return fmt.Errorf("idle: %w", err)
	}
	return peerStore(ctx, r)
}

// runPeerStore is peer's last parts alone, for a quicker look at them.
func runPeerStore(ctx context.Context, r *runner) error {
	if err := peerBinary(r); err != nil {
		return err
	}
	return peerStore(ctx, r)
}

// peerStore runs the parts on a store of 100,000 events: the replay and
// the file's size (peerLog), then each server's start on it (peerStart).
func peerStore(ctx context.Context, r *runner) error {
	// Mercure's file of peerLog is the one its cold start opens.
	dir, cleanup, err := r.tempDir()
	if err != nil {
		return err
	}
	defer cleanup()
	mercureDB := filepath.Join(dir, "mercure.db")
	if err := peerLog(ctx, r, mercureDB); err != nil {
		return fmt.Errorf("replay and file size: %w", err)
	}
	if err := peerStart(ctx, r, mercureDB); err != nil {
		return fmt.Errorf("cold start: %w", err)
	}
	return nil
}

// peerBinary checks that the mercure-peer binary is given and there.
func peerBinary(r *runner) error {
	if r.cfg.PeerMercure == "" {
		return errors.New("the peer scenario needs the mercure-peer binary: internal/bench/mercure/run builds it and runs the scenario, " +
			"or pass its path with --peer-mercure (SPARKLES_BENCH_PEER_MERCURE)")
	}
	if _, err := os.Stat(r.cfg.PeerMercure); err != nil {
		return fmt.Errorf("the peer scenario's mercure-peer binary: %w", err)
	}
	if r.cfg.MercureHub != "" {
		if _, err := os.Stat(r.cfg.MercureHub); err != nil {
			return fmt.Errorf("the peer scenario's Mercure hub: %w; build it with `cd internal/bench/mercurehub && go build -o mercure .` and pass its path to --mercure-hub", err)
		}
	}
	return nil
}

// pair is one quantity measured on both servers.
type pair struct {
	name, unit        string
	sparkles, mercure float64
	cond              string // of both
	sCond, mCond      string // of each side
	// higher tells which way is better: then a ratio above 1 favours
	// Sparkles, else one below 1 does.
	higher bool
	// target is what the ratio is held to (at least, when higher is
	// better; at most otherwise); 0 for none.
	target float64
	// mercureShown says the Mercure value is a figure already, of
	// another pair measured against the same run: only the Sparkles
	// value and the ratio are added.
	mercureShown bool
	// sparklesShown says the same of the Sparkles value.
	sparklesShown bool
}

// addPair adds the two values and their ratio, sparkles/mercure. A Mercure
// value of zero has no ratio.
func (r *runner) addPair(p pair) {
	join := func(a, b string) string {
		if a == "" || b == "" {
			return a + b
		}
		return a + "; " + b
	}
	if !p.sparklesShown {
		r.add(Figure{Name: p.name + ", sparkles", Value: p.sparkles, Unit: p.unit, Conditions: join(p.cond, p.sCond)})
	}
	if !p.mercureShown {
		r.add(Figure{Name: p.name + ", mercure", Value: p.mercure, Unit: p.unit, Conditions: join(p.cond, p.mCond)})
	}
	if p.mercure == 0 {
		return
	}
	better := "below 1 favours Sparkles"
	if p.higher {
		better = "above 1 favours Sparkles"
	}
	f := Figure{Name: p.name + ", sparkles/mercure", Value: p.sparkles / p.mercure, Unit: "x",
		Conditions: fmt.Sprintf("%s %s against %s %s; %s", formatNumber(p.sparkles, p.unit), p.unit, formatNumber(p.mercure, p.unit), p.unit, better)}
	if p.target > 0 {
		if p.higher {
			f.Target, f.Met = fmt.Sprintf(">= %gx", p.target), atLeast(f.Value, p.target)
		} else {
			f.Target, f.Met = fmt.Sprintf("<= %gx", p.target), atLeast(p.target, f.Value)
		}
	}
	r.add(f)
}
