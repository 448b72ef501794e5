package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync/atomic"
	"time"

	"github.com/sparkles-dev/sparkles/sandbox"
)

// The peer scenario's part on a filled log: each store filled with the
// same events, the size of its file, and the replay of them all over SSE.

// peerLog fills one sandbox and one topic with the same number of events
// of the same size, then measures the file each store keeps them in and
// the time to replay them all over SSE from the start.
func peerLog(ctx context.Context, r *runner, mercureDB string) error {
	n := peerLogEvents(r)
	turn := pick(r, 1000, 100)
	s, err := sparklesLog(ctx, r, n, turn)
	if err != nil {
		return fmt.Errorf("sparkles: %w", err)
	}
	m, err := mercureLog(ctx, r, mercureDB, n, s.sample)
	if err != nil {
		return fmt.Errorf("mercure: %w", err)
	}
	r.addPair(pair{name: fmt.Sprintf("file size after %d events", n), unit: "MiB", sparkles: mib(s.file), mercure: mib(m.file),
		cond: fmt.Sprintf("%d events of about %d bytes in one sandbox or topic: Mercure's data is the JSON of one of the Sparkles events", n, len(s.sample)),
		sCond: fmt.Sprintf("appended 100 per call in turns of %d tool calls, WAL drained; %.1f MiB of event JSON, %.1f MiB of pages in use; filled in %.1f s",
			turn, mib(s.events), mib(s.inUse), s.fill.Seconds()),
		mCond: fmt.Sprintf("%d publishers POSTing one update at a time, each acknowledged; filled in %.1f s", mercureFillers, m.fill.Seconds())})
	replayCond := fmt.Sprintf("the %d events above read by one SSE client from the start (Sparkles since=0, Mercure lastEventID=earliest); median of 3", n)
	if m.got < int64(n) {
		r.add(Figure{Name: fmt.Sprintf("replay of %d events, sparkles", n), Value: s.replay.Seconds(), Unit: "s", Conditions: replayCond})
		r.add(Figure{Name: fmt.Sprintf("replay of %d events, mercure: events received", n), Value: float64(m.got), Unit: "events",
			Conditions: fmt.Sprintf("%s; Mercure's stream of history ended after %d events (%s), and no reconnection with Last-Event-ID brought more", replayCond, m.got, m.why)})
		r.addPair(pair{name: "replay rate", unit: "events/s", sparkles: perSecond(int64(n), s.replay), mercure: perSecond(m.got, m.replay), higher: true,
			cond: replayCond + "; Mercure's over the events it sent"})
		return nil
	}
	r.addPair(pair{name: fmt.Sprintf("replay of %d events", n), unit: "s", sparkles: s.replay.Seconds(), mercure: m.replay.Seconds(), cond: replayCond})
	return nil
}

type logResult struct {
	file, inUse, events int64
	fill, replay        time.Duration
	got                 int64  // events replayed
	why                 string // the replay ended short: why
	sample              []byte // one event's data as streamed
}

func sparklesLog(ctx context.Context, r *runner, n, turn int) (logResult, error) {
	var res logResult
	c, closeServer, err := r.child(ctx)
	if err != nil {
		return res, err
	}
	defer closeServer()
	r.logf("sparkles: appending %d events", n)
	start := time.Now()
	filled, err := c.do(ctx, childRequest{Op: "filltools", N: n, Fill: turn})
	if err != nil {
		return res, err
	}
	res.fill = time.Since(start)
	id := filled.IDs[0]
	u, err := c.do(ctx, childRequest{Op: "file", IDs: []string{id}})
	if err != nil {
		return res, err
	}
	if u.File.EventN != n {
		return res, fmt.Errorf("the sandbox holds %d events, want %d", u.File.EventN, n)
	}
	res.file, res.inUse, res.events = u.File.File, u.File.InUse, u.File.Events
	var times []time.Duration
	for range 3 {
		d, sample, err := replaySparkles(ctx, c.addr, c.token, id, n)
		if err != nil {
			return res, err
		}
		times, res.sample = append(times, d), sample
	}
	slices.Sort(times)
	res.replay, res.got = times[1], int64(n)
	return res, nil
}

// replaySparkles reads n events over one stream from since=0 and returns
// how long that took, and the data of a tool.updated event.
func replaySparkles(ctx context.Context, addr, token, id string, n int) (time.Duration, []byte, error) {
	start := time.Now()
	s, err := openStream(ctx, addr, token, id, 0, 64<<10)
	if err != nil {
		return 0, nil, err
	}
	defer s.Close()
	defer s.closeOnDone(ctx)()
	var sample []byte
	for got := 0; got < n; {
		f, err := s.next()
		if err != nil {
			return 0, nil, fmt.Errorf("after %d events: %w", got, err)
		}
		if f.id == 0 {
			continue
		}
		got++
		if sample == nil && string(f.event) == string(sandbox.TypeToolUpdated) {
			sample = append([]byte(nil), f.data...)
		}
	}
	if sample == nil {
		return 0, nil, errors.New("the log holds no tool.updated event")
	}
	return time.Since(start), sample, nil
}

// peerLogEvents is how many events peerLog fills each store with.
func peerLogEvents(r *runner) int { return pick(r, 100000, 2000) }

// mercureFillers is how many publishers fill Mercure's topic for peerLog.
const mercureFillers = 16

// mercureLog fills a Mercure hub on the bolt file db, which it leaves for
// the cold start.
func mercureLog(ctx context.Context, r *runner, db string, n int, payload []byte) (logResult, error) {
	var res logResult
	p, err := startPeer(ctx, r.cfg.PeerMercure, db)
	if err != nil {
		return res, err
	}
	defer p.close()
	r.logf("mercure: publishing %d events", n)
	pub := p.publisher(mercureFillers)
	defer pub.close()
	start := time.Now()
	var next atomic.Int64
	err = parallel(ctx, mercureFillers, mercureFillers, func(ctx context.Context, _ int) error {
		for next.Add(1) <= int64(n) {
			if _, err := pub.publish(ctx, peerTopic(0), string(payload)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return res, err
	}
	res.fill = time.Since(start)
	fi, err := os.Stat(p.db)
	if err != nil {
		return res, err
	}
	res.file = fi.Size()
	var times []time.Duration
	for range 3 {
		d, got, why, err := replayMercure(ctx, p.addr, peerTopic(0), n)
		if err != nil {
			return res, err
		}
		times, res.got, res.why = append(times, d), got, why
	}
	slices.Sort(times)
	res.replay = times[1]
	return res, nil
}
