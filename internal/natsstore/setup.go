package natsstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sparkles-dev/sparkles/sandbox"
)

// Open and the steps it takes: it connects, checks the server, opens the
// stream and the buckets (asked again while a cluster that is starting is
// not ready), learns every sandbox from the watch, and folds in what a
// crashed append left beyond a state.

// Open connects to the NATS server at url, checks that it is recent enough
// and has JetStream, creates the stream and the bucket if they do not exist
// (an existing one keeps its settings; what Sparkles cannot work with is
// an error, see setup.go), learns every sandbox from the bucket, and folds
// into its state any events that a process which crashed mid-append left
// beyond it.
func Open(ctx context.Context, url string, opts Options) (*Store, error) {
	if opts.StreamName == "" {
		opts.StreamName = DefaultStreamName
	}
	if opts.KVBucket == "" {
		opts.KVBucket = DefaultKVBucket
	}
	if opts.SubjectPrefix == "" {
		opts.SubjectPrefix = DefaultSubjectPrefix
	}
	if opts.WebhookBucket == "" {
		opts.WebhookBucket = opts.KVBucket + "-webhooks"
	}
	if opts.Replicas < 1 {
		opts.Replicas = DefaultReplicas
	}
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	if opts.StartTimeout <= 0 {
		opts.StartTimeout = DefaultStartTimeout
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	log := opts.Logger
	reach := newReach()
	nopts := append([]nats.Option{
		nats.Name("sparkles"),
		nats.MaxReconnects(-1),
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			if sub != nil {
				log.Warn("natsstore: subscription error", "subject", sub.Subject, "err", err)
				return
			}
			log.Warn("natsstore: connection error", "err", err)
		}),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				log.Warn("natsstore: disconnected from NATS", "err", err)
			}
			reach.fail("not connected to NATS (reconnecting)")
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			log.Info("natsstore: reconnected to NATS", "url", nc.ConnectedUrlRedacted())
			reach.probeNow()
		}),
	}, opts.NATSOptions...)
	nc, err := nats.Connect(url, nopts...)
	if err != nil {
		return nil, fmt.Errorf("cannot connect to NATS at %s: %w", url, err)
	}
	s := &Store{
		nc:            nc,
		streamName:    opts.StreamName,
		kvStream:      "KV_" + opts.KVBucket,
		kvPrefix:      "$KV." + opts.KVBucket + ".",
		subjectPrefix: opts.SubjectPrefix,
		fencePrefix:   fencePrefix(opts.SubjectPrefix),
		bothPrefix:    bothPrefix(opts.SubjectPrefix),
		log:           opts.Logger,
		now:           opts.Now,
		timeout:       opts.Timeout,
		startTimeout:  opts.StartTimeout,
		observer:      opts.Observer,
		reach:         reach,
		sandboxes:     make(map[string]*entry),
		dropped:       make(map[string]uint64),
		holds:         make(map[string]uint64),
	}
	if err := s.init(ctx, opts); err != nil {
		s.shutdown()
		return nil, err
	}
	return s, nil
}

func (s *Store) init(ctx context.Context, opts Options) error {
	if err := checkServer(s.nc); err != nil {
		return err
	}
	js, err := jetstream.New(s.nc, jetstream.WithDefaultTimeout(s.timeout))
	if err != nil {
		return err
	}
	s.js = js
	until := time.Now().Add(s.startTimeout)
	if err := s.whenReady(ctx, until, s.checkJetStream); err != nil {
		return err
	}
	if err := s.whenReady(ctx, until, func(ctx context.Context) error { return s.openStream(ctx, opts) }); err != nil {
		return err
	}
	if err := s.whenReady(ctx, until, func(ctx context.Context) (err error) {
		s.kv, err = s.openBucket(ctx, jetstream.KeyValueConfig{
			Bucket:      opts.KVBucket,
			Description: "Sparkles sandbox states, configs, turns and approvals",
			History:     1,
			Storage:     jetstream.FileStorage,
			Replicas:    opts.Replicas,
		}, noTTL)
		return err
	}); err != nil {
		return err
	}
	if err := s.openWebhooks(ctx, until, opts); err != nil {
		return err
	}
	wctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	// A bucket just made with replicas may not have elected its leader
	// yet: its watch is asked again, within the request timeout, before
	// the store gives up on it.
	deadline := time.Now().Add(s.timeout)
	for {
		s.watcher, err = s.kv.WatchFiltered(wctx, []string{"state.*"})
		if err == nil || time.Now().After(deadline) || ctx.Err() != nil {
			break
		}
		select {
		case <-time.After(100 * time.Millisecond): // backoff between asks, not a wait for a condition
		case <-ctx.Done():
		}
	}
	if err != nil {
		cancel()
		return fmt.Errorf("cannot watch bucket %s: %w", opts.KVBucket, err)
	}
	// The initial values end with a nil entry; only then is every sandbox
	// known, so listings are complete from the start.
initial:
	for {
		select {
		case kve, ok := <-s.watcher.Updates():
			if !ok {
				return errors.New("watch of sandbox states ended while loading")
			}
			if kve == nil {
				break initial
			}
			s.applyWatch(kve)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	s.wg.Add(2)
	go func() {
		defer s.wg.Done()
		s.watchLoop(wctx)
	}()
	go func() {
		defer s.wg.Done()
		s.probeLoop(wctx)
	}()
	return s.repairAll(ctx)
}

// minServer is the oldest nats-server with every JetStream feature the
// store uses: atomic batch publish (2.12; appends to a replicated stream),
// batched direct get and multi_last (2.11; every read and tip), and
// expected last sequence on another subject or a wildcard (2.11; fences).
// An older server takes the stream's settings and then refuses every
// append, so Open refuses it first.
var minServer = [3]int{2, 12, 0}

// checkServer refuses a nats-server older than minServer. The version is
// the one the server gave in its INFO when the connection was made.
func checkServer(nc *nats.Conn) error {
	v := nc.ConnectedServerVersion()
	got, ok := parseVersion(v)
	if !ok || slices.Compare(got[:], minServer[:]) < 0 {
		return fmt.Errorf("nats-server %s at %s is too old: Sparkles needs nats-server %d.%d.%d or later",
			v, nc.ConnectedUrlRedacted(), minServer[0], minServer[1], minServer[2])
	}
	return nil
}

// parseVersion reads major.minor.patch from a version such as 2.12.1 or
// 2.14.0-RC.1.
func parseVersion(v string) ([3]int, bool) {
	var out [3]int
	v, _, _ = strings.Cut(v, "-")
	parts := strings.Split(v, ".")
	if len(parts) != 3 {
		return out, false
	}
	for i, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil {
			return out, false
		}
		out[i] = n
	}
	return out, true
}

// checkJetStream refuses a server without JetStream for this account.
func (s *Store) checkJetStream(ctx context.Context) error {
	ctx, cancel := s.opCtx(ctx)
	defer cancel()
	_, err := s.js.AccountInfo(ctx)
	if errors.Is(err, jetstream.ErrJetStreamNotEnabled) || errors.Is(err, jetstream.ErrJetStreamNotEnabledForAccount) {
		return fmt.Errorf("nats-server at %s has no JetStream for this account: start it with -js (or a jetstream block in its config)", s.nc.ConnectedUrlRedacted())
	}
	if err != nil {
		return fmt.Errorf("nats-server at %s: JetStream does not answer: %w", s.nc.ConnectedUrlRedacted(), err)
	}
	return nil
}

// openStream opens the stream of the logs, creating it if it does not
// exist. An existing stream keeps its settings (replicas, limits, storage,
// placement are the operator's); what Sparkles cannot work with is one
// error naming it, and the few switches it needs that change nothing
// else are turned on (its fence subjects, direct gets, atomic batches),
// as when a stream made by an earlier version is first opened by this one.
func (s *Store) openStream(ctx context.Context, opts Options) error {
	ctx, cancel := s.opCtx(ctx)
	defer cancel()
	want := []string{s.subjectPrefix + ".*", s.fencePrefix + ".*"}
	stream, err := s.js.Stream(ctx, opts.StreamName)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		stream, err = s.js.CreateStream(ctx, jetstream.StreamConfig{
			Name:        opts.StreamName,
			Description: "Sparkles sandbox event logs, one subject per sandbox, and their fences",
			Subjects:    want,
			Storage:     jetstream.FileStorage,
			Retention:   jetstream.LimitsPolicy,
			Discard:     jetstream.DiscardOld,
			MaxAge:      opts.MaxAge,
			Replicas:    opts.Replicas,
			// Reads are batched direct gets: no consumer per reader.
			AllowDirect:        true,
			AllowAtomicPublish: true,
		})
		if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			stream, err = s.js.Stream(ctx, opts.StreamName) // another node made it first
		}
	}
	if err != nil {
		return fmt.Errorf("cannot open stream %s: %w", opts.StreamName, err)
	}
	info := stream.CachedInfo()
	cfg := info.Config
	var broken []string
	if cfg.Retention != jetstream.LimitsPolicy {
		broken = append(broken, fmt.Sprintf("retention is %s, and Sparkles needs limits (it keeps every event until it prunes)", cfg.Retention))
	}
	if cfg.DenyDelete || cfg.DenyPurge {
		broken = append(broken, "it denies deletes or purges, which retention needs")
	}
	if cfg.Sealed {
		broken = append(broken, "it is sealed")
	}
	if cfg.Mirror != nil {
		broken = append(broken, "it is a mirror")
	}
	for _, subj := range cfg.Subjects {
		if !slices.Contains(want, subj) {
			broken = append(broken, fmt.Sprintf("it holds subjects %v; Sparkles needs exactly %v", cfg.Subjects, want))
			break
		}
	}
	if len(broken) > 0 {
		return fmt.Errorf("stream %s cannot hold Sparkles' logs: %s; fix its settings or pass another stream name", opts.StreamName, strings.Join(broken, "; "))
	}
	if !slices.Contains(cfg.Subjects, want[0]) || !slices.Contains(cfg.Subjects, want[1]) || !cfg.AllowDirect || !cfg.AllowAtomicPublish {
		cfg.Subjects = want
		cfg.AllowDirect, cfg.AllowAtomicPublish = true, true
		if stream, err = s.js.UpdateStream(ctx, cfg); err != nil {
			return fmt.Errorf("stream %s: turn on what Sparkles needs (subjects %v, direct gets, atomic batches): %w", opts.StreamName, want, err)
		}
		s.log.Info("natsstore: turned on what Sparkles needs in the stream", "stream", opts.StreamName, "subjects", want)
		info = stream.CachedInfo()
	}
	if opts.MaxAge > 0 && info.Config.MaxAge > 0 && info.Config.MaxAge < opts.MaxAge {
		s.log.Warn("natsstore: the stream drops events younger than the safety net asked for; the retention loop should prune first",
			"stream", opts.StreamName, "max_age", info.Config.MaxAge, "asked", opts.MaxAge)
	}
	s.stream = stream
	s.publish = s.publishPipelined
	if replicated(info) {
		s.publish = s.publishAtomic
	}
	return nil
}

// replicated reports whether a stream is managed by a JetStream cluster,
// where a leader checks publishes before it replicates them.
func replicated(info *jetstream.StreamInfo) bool {
	return info.Cluster != nil && (info.Cluster.RaftGroup != "" || len(info.Cluster.Replicas) > 0)
}

// Bucket opens a key-value bucket on the store's connection, creating it
// as cfg says if it does not exist. An existing bucket keeps its settings;
// check, when not nil, refuses one Sparkles cannot work with. The cluster
// side (natscluster) keeps its node and lease buckets so.
func (s *Store) Bucket(ctx context.Context, cfg jetstream.KeyValueConfig, check func(jetstream.KeyValueStatus) error) (jetstream.KeyValue, error) {
	if err := s.enter(); err != nil {
		return nil, err
	}
	defer s.leave()
	if check == nil {
		check = func(jetstream.KeyValueStatus) error { return nil }
	}
	var kv jetstream.KeyValue
	err := s.whenReady(ctx, time.Now().Add(s.startTimeout), func(ctx context.Context) (err error) {
		kv, err = s.openBucket(ctx, cfg, check)
		return err
	})
	return kv, err
}

// whenReady runs step, one part of setting the store up, within the
// request timeout, and runs it again while JetStream is not ready for it
// (notReady), until the time until.
// A cluster that has just formed, or lost its meta leader, answers 503 or
// not at all for a while, and a stream just made with replicas answers
// only once its group has a leader; a coordinator started with its NATS
// cluster waits for it rather than exiting. Each step looks its stream or
// bucket up before making it, so a step run again after a create that
// timed out finds what the first made.
func (s *Store) whenReady(ctx context.Context, until time.Time, step func(context.Context) error) error {
	for attempt := 0; ; attempt++ {
		sctx, cancel := context.WithTimeout(ctx, s.timeout)
		err := step(sctx)
		cancel()
		if err == nil || !notReady(err) || ctx.Err() != nil {
			return err
		}
		if !time.Now().Before(until) {
			return fmt.Errorf("%w (JetStream was still not ready after %s)", err, s.startTimeout)
		}
		s.log.Warn("natsstore: JetStream is not ready, asking again", "err", err)
		t := time.NewTimer(min(100*time.Millisecond<<min(attempt, 4), time.Until(until)))
		select {
		case <-t.C: // backoff between asks, not a wait for a condition
		case <-ctx.Done():
			t.Stop()
			return err
		}
	}
}

// notReady reports whether err says JetStream could not answer yet, as
// opposed to refusing what was asked: a request that timed out, no
// responders for the API, 503 "JetStream system temporarily unavailable",
// or a placement that failed only because peers are offline (a leader
// that has not yet noticed it lost its quorum, or servers still starting).
func notReady(err error) bool {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		return apiErr.Code == 503 || // 10008, temporarily unavailable
			apiErr.ErrorCode == 10005 && apiErr.Description == "no suitable peers for placement, peer offline"
	}
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) || errors.Is(err, nats.ErrNoResponders) ||
		errors.Is(err, jetstream.ErrNoStreamResponse)
}

// openBucket opens a key-value bucket, creating it as cfg says if it does
// not exist. An existing bucket keeps its settings; check refuses one that
// Sparkles cannot work with.
func (s *Store) openBucket(ctx context.Context, cfg jetstream.KeyValueConfig, check func(jetstream.KeyValueStatus) error) (jetstream.KeyValue, error) {
	ctx, cancel := s.opCtx(ctx)
	defer cancel()
	kv, err := s.js.KeyValue(ctx, cfg.Bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		kv, err = s.js.CreateKeyValue(ctx, cfg)
		if errors.Is(err, jetstream.ErrBucketExists) {
			kv, err = s.js.KeyValue(ctx, cfg.Bucket) // another node made it first
		}
	}
	if err != nil {
		return nil, fmt.Errorf("cannot open key-value bucket %s: %w", cfg.Bucket, err)
	}
	st, err := kv.Status(ctx)
	if err != nil {
		return nil, fmt.Errorf("cannot read key-value bucket %s: %w", cfg.Bucket, err)
	}
	if err := check(st); err != nil {
		return nil, fmt.Errorf("key-value bucket %s cannot hold what Sparkles keeps there: %w; fix its settings or delete it while no node runs", cfg.Bucket, err)
	}
	// The bucket's info comes from the meta leader; its reads are answered
	// only once its own group has a leader. A bucket just made with
	// replicas said "no responders" to the first read of a lease, so the
	// bucket counts as open once it answers one the way every read goes:
	// a key no one writes, not found by a replica and then by the leader.
	lkv := leaderKV{KeyValue: kv, s: s}
	if _, err := lkv.Get(ctx, readyKey); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, fmt.Errorf("key-value bucket %s does not answer reads: %w", cfg.Bucket, err)
	}
	return lkv, nil
}

// readyKey is the key openBucket reads to learn that a bucket answers; no
// one writes it.
const readyKey = "sparkles-open-probe"

// noTTL refuses a bucket whose keys expire: states must stay until
// Sparkles removes them.
func noTTL(st jetstream.KeyValueStatus) error {
	if st.TTL() != 0 {
		return fmt.Errorf("its keys expire after %s", st.TTL())
	}
	return nil
}

// repairAll folds the events a crashed append left beyond the state of any
// sandbox. It asks for the last sequence of many subjects at once.
func (s *Store) repairAll(ctx context.Context) error {
	s.mu.Lock()
	last := make(map[string]uint64, len(s.sandboxes))
	for id, e := range s.sandboxes {
		last[id] = uint64(e.sb.LastEventID)
	}
	ids := slices.Clone(s.ids)
	s.mu.Unlock()
	var errs []error
	for chunk := range slices.Chunk(ids, 512) {
		subjects := make([]string, len(chunk))
		for i, id := range chunk {
			subjects[i] = s.subject(id)
		}
		tips, err := s.lastSeqs(ctx, subjects, 0)
		if err != nil {
			return fmt.Errorf("cannot read the tips of the event logs: %w", err)
		}
		for _, id := range chunk {
			if tips[s.subject(id)] <= last[id] {
				continue
			}
			if err := s.repairOne(ctx, id); err != nil && !sandbox.IsType(err, sandbox.ENotFound) {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

func (s *Store) repairOne(ctx context.Context, id string) error {
	e, err := s.lookup(ctx, id)
	if err != nil {
		return err
	}
	e.wmu.Lock()
	defer e.wmu.Unlock()
	s.invalidate(e)
	_, err = s.loadForWrite(ctx, e, nil)
	return err
}
