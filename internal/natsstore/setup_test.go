package natsstore_test

import (
	"bufio"
	"context"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sparkles-dev/sparkles/internal/natscluster"
	"github.com/sparkles-dev/sparkles/internal/natsstore"
	"github.com/sparkles-dev/sparkles/internal/natsstore/natstest"
	"github.com/sparkles-dev/sparkles/sandbox"
)

// oldServer is a stand-in for a nats-server of the given version on
// loopback: it says INFO and answers PING, which is all a client needs to
// connect, and nothing of JetStream.
func oldServer(t *testing.T, version string) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				_, _ = conn.Write([]byte(`INFO {"server_id":"OLD","server_name":"old","version":"` + version +
					`","proto":1,"go":"go1.19","host":"127.0.0.1","port":4222,"headers":true,"max_payload":1048576}` + "\r\n"))
				r := bufio.NewReader(conn)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					if strings.HasPrefix(line, "PING") {
						_, _ = conn.Write([]byte("PONG\r\n"))
					}
				}
			}()
		}
	}()
	return "nats://" + l.Addr().String()
}

func openErr(t *testing.T, url string, opts natsstore.Options) error {
	t.Helper()
	opts.Logger = slog.New(slog.DiscardHandler)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := natsstore.Open(ctx, url, opts)
	if err == nil {
		s.Close()
	}
	return err
}

// TestServerChecks: Open refuses, with one sentence that says what is
// wrong, a server too old for what the store uses and a server without
// JetStream, before it creates or changes anything.
func TestServerChecks(t *testing.T) {
	t.Run("ErrOldServer", func(t *testing.T) {
		err := openErr(t, oldServer(t, "2.9.25"), natsstore.Options{})
		if err == nil || !strings.Contains(err.Error(), "2.9.25") || !strings.Contains(err.Error(), "2.12.0 or later") {
			t.Fatalf("Open on a 2.9 server: err = %v, want it too old with the minimum named", err)
		}
	})
	t.Run("ErrNoJetStream", func(t *testing.T) {
		url, _ := natstest.RunServerConfig(t, natstest.Config{NoJetStream: true})
		err := openErr(t, url, natsstore.Options{})
		if err == nil || !strings.Contains(err.Error(), "no JetStream") {
			t.Fatalf("Open on a server without JetStream: err = %v", err)
		}
	})
}

// TestExistingSettings: a stream and buckets that an operator made keep
// their replicas and limits whatever Options.Replicas says; Sparkles only
// turns on the switches it needs. Settings it cannot work with are one
// error at Open.
func TestExistingSettings(t *testing.T) {
	ctx := context.Background()
	t.Run("KeptOnACluster", func(t *testing.T) {
		c := natstest.RunCluster(t, 3)
		js := natstest.JetStream(t, c.URL())
		// As an earlier version made it: no fence subjects, no atomic
		// batches; and the operator's replicas and age limit.
		if _, err := js.CreateStream(ctx, jetstream.StreamConfig{
			Name: natsstore.DefaultStreamName, Subjects: []string{"sparkles.events.*"},
			Storage: jetstream.FileStorage, Replicas: 3, MaxAge: 90 * 24 * time.Hour, AllowDirect: true,
		}); err != nil {
			t.Fatal(err)
		}
		for _, cfg := range []jetstream.KeyValueConfig{
			{Bucket: natsstore.DefaultKVBucket, Replicas: 3, History: 5},
			{Bucket: natscluster.DefaultLeaseBucket, Replicas: 3},
			{Bucket: natscluster.DefaultNodeBucket, Replicas: 3, TTL: 7 * time.Second},
		} {
			if _, err := js.CreateKeyValue(ctx, cfg); err != nil {
				t.Fatal(err)
			}
		}
		s, err := natsstore.Open(ctx, c.URL(), natsstore.Options{Replicas: 1, MaxAge: time.Hour, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		cl, err := natscluster.Join(ctx, s, natscluster.Options{Node: "n1", Replicas: 1, LeaseTTL: time.Second, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		stream, err := js.Stream(ctx, natsstore.DefaultStreamName)
		if err != nil {
			t.Fatal(err)
		}
		cfg := stream.CachedInfo().Config
		if cfg.Replicas != 3 || cfg.MaxAge != 90*24*time.Hour {
			t.Fatalf("stream after Open: replicas %d, max age %s; want the operator's 3 and 2160h", cfg.Replicas, cfg.MaxAge)
		}
		if !slices.Equal(cfg.Subjects, []string{"sparkles.events.*", "sparkles.events-fence.*"}) || !cfg.AllowAtomicPublish {
			t.Fatalf("stream after Open: subjects %v, atomic batches %v; want the fence subjects and atomic batches on", cfg.Subjects, cfg.AllowAtomicPublish)
		}
		for bucket, want := range map[string]int64{natsstore.DefaultKVBucket: 5, natscluster.DefaultLeaseBucket: 1, natscluster.DefaultNodeBucket: 1} {
			kv, err := js.KeyValue(ctx, bucket)
			if err != nil {
				t.Fatal(err)
			}
			st, err := kv.Status(ctx)
			if err != nil {
				t.Fatal(err)
			}
			info := st.(*jetstream.KeyValueBucketStatus).StreamInfo()
			if info.Config.Replicas != 3 || st.History() != want {
				t.Fatalf("bucket %s after Open: replicas %d, history %d; want the operator's 3 and %d", bucket, info.Config.Replicas, st.History(), want)
			}
		}
		if got := cl.TTL(); got != 7*time.Second {
			t.Fatalf("lease TTL %s, want the node bucket's 7s", got)
		}
		// And it works: an append on the operator's stream. A cluster of
		// three whose streams and buckets were just made and updated may
		// answer a first write "unavailable" (no leader yet, the error a
		// client is told to try again after): it is tried again until it
		// is taken or 30 s went by.
		sb := sandbox.Sandbox{ID: "c_1", Object: "sandbox", Status: sandbox.StatusReady, Agent: "demo", CreatedAt: t0, UpdatedAt: t0}
		for deadline := time.Now().Add(30 * time.Second); ; {
			err := s.Create(ctx, sb, []byte(`{}`))
			if err == nil {
				break
			}
			if sandbox.ErrorType(err) != sandbox.EUnavailable || time.Now().After(deadline) {
				t.Fatal(err)
			}
			t.Logf("create: %v; trying again", err)
			time.Sleep(50 * time.Millisecond)
		}
		mustAppend(t, s, "c_1", textEvent("a"), textEvent("b"))
	})

	t.Run("Refused", func(t *testing.T) {
		for _, tc := range []struct {
			name string
			make func(js jetstream.JetStream) error
			want string
		}{
			{"ErrWorkQueue", func(js jetstream.JetStream) error {
				_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: natsstore.DefaultStreamName,
					Subjects: []string{"sparkles.events.*"}, Retention: jetstream.WorkQueuePolicy})
				return err
			}, "retention is WorkQueue"},
			{"ErrForeignSubjects", func(js jetstream.JetStream) error {
				_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: natsstore.DefaultStreamName,
					Subjects: []string{"sparkles.events.*", "orders.>"}})
				return err
			}, "holds subjects"},
			{"ErrStateTTL", func(js jetstream.JetStream) error {
				_, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: natsstore.DefaultKVBucket, TTL: time.Hour})
				return err
			}, "expire after 1h0m0s"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				url, _ := natstest.RunServer(t)
				if err := tc.make(natstest.JetStream(t, url)); err != nil {
					t.Fatal(err)
				}
				err := openErr(t, url, natsstore.Options{})
				if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Count(err.Error(), "\n") > 0 {
					t.Fatalf("Open: err = %v, want one line with %q", err, tc.want)
				}
			})
		}
		t.Run("ErrNodesNoTTL", func(t *testing.T) {
			url, _ := natstest.RunServer(t)
			if _, err := natstest.JetStream(t, url).CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: natscluster.DefaultNodeBucket}); err != nil {
				t.Fatal(err)
			}
			s := mustOpen(t, url)
			defer s.Close()
			_, err := natscluster.Join(ctx, s, natscluster.Options{Node: "n1", Logger: slog.New(slog.DiscardHandler)})
			if err == nil || !strings.Contains(err.Error(), "never expire") {
				t.Fatalf("natscluster.Join with a node bucket whose keys never expire: err = %v", err)
			}
		})
	})
}

// TestHealth: Health is nil while the store can write, and says why not
// once the store learned that the server is gone (it answers from what it
// knows, without asking the server).
func TestHealth(t *testing.T) {
	url, stop := natstest.RunServer(t)
	s := mustOpen(t, url)
	defer s.Close()
	if err := s.Health(context.Background()); err != nil {
		t.Fatalf("Health of a store on a running server: %v", err)
	}
	stop()
	deadline := time.Now().Add(30 * time.Second)
	for s.Health(context.Background()) == nil {
		if time.Now().After(deadline) {
			t.Fatal("Health with the server gone: nil")
		}
		time.Sleep(5 * time.Millisecond) // polls a condition, with a deadline
	}
}

// signalHandler is a slog handler that closes ready the first time a
// record with message msg is logged.
type signalHandler struct {
	msg   string
	ready chan struct{}
	once  *sync.Once
}

func (h signalHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h signalHandler) Handle(_ context.Context, r slog.Record) error {
	if r.Message == h.msg {
		h.once.Do(func() { close(h.ready) })
	}
	return nil
}
func (h signalHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h signalHandler) WithGroup(string) slog.Handler      { return h }

// TestOpenWaitsForJetStream: Open against a cluster that has lost its
// quorum keeps asking until StartTimeout and then fails saying JetStream
// was not ready; an Open begun while the quorum is gone succeeds once the
// servers are back, with the stream and bucket made at 3 replicas.
func TestOpenWaitsForJetStream(t *testing.T) {
	c := natstest.RunCluster(t, 3)
	c.Stop(1)
	c.Stop(2)

	err := openErr(t, c.URL(), natsstore.Options{Replicas: 3, Timeout: 500 * time.Millisecond, StartTimeout: time.Second})
	if err == nil || !strings.Contains(err.Error(), "JetStream was still not ready after 1s") {
		t.Fatalf("Open without quorum: %v, want JetStream still not ready after 1s", err)
	}

	h := signalHandler{msg: "natsstore: JetStream is not ready, asking again", ready: make(chan struct{}), once: new(sync.Once)}
	opened := make(chan error, 1)
	go func() {
		s, err := natsstore.Open(context.Background(), c.URL(), natsstore.Options{Replicas: 3, Timeout: time.Second,
			StartTimeout: 2 * time.Minute, Logger: slog.New(h)})
		if err == nil {
			err = s.Close()
		}
		opened <- err
	}()
	select {
	case <-h.ready:
	case err := <-opened:
		t.Fatalf("Open without quorum returned %v before asking again", err)
	}
	c.Restart(1)
	c.Restart(2)
	if err := <-opened; err != nil {
		t.Fatalf("Open once the quorum is back: %v", err)
	}
	natstest.CheckReplicas(t, c.URL(), 3, natsstore.DefaultStreamName, "KV_"+natsstore.DefaultKVBucket, "KV_"+natsstore.DefaultKVBucket+"-webhooks")
}
