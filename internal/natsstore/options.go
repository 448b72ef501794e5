package natsstore

import (
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
)

// Options tune a Store: their defaults, and the Observer they may carry.

// Defaults of Options.
const (
	DefaultStreamName    = "SPARKLES"
	DefaultKVBucket      = "sparkles"
	DefaultSubjectPrefix = "sparkles.events"
	DefaultTimeout       = 10 * time.Second
	DefaultStartTimeout  = 60 * time.Second
	// DefaultReplicas keeps one copy: replicas need a JetStream cluster.
	DefaultReplicas = 1
)

// Options tune a Store. Zero values take the defaults.
type Options struct {
	// StreamName is the JetStream stream of the event logs (default SPARKLES).
	StreamName string
	// KVBucket is the key-value bucket of states and resources (default sparkles).
	KVBucket string
	// WebhookBucket is the key-value bucket of webhook endpoints and their
	// cursors (default <KVBucket>-webhooks).
	WebhookBucket string
	// SubjectPrefix is the stream's subject space: the log of sandbox id is
	// <SubjectPrefix>.<id> (default sparkles.events). Two deployments can
	// share a NATS account with different prefixes and names.
	SubjectPrefix string
	// MaxAge is a safety net on the stream: JetStream drops messages older
	// than this on its own, without moving any watermark. Set it well above
	// the retention loop's age, which is what prunes (default 0: none).
	MaxAge time.Duration
	// Replicas of the stream and the bucket when Open creates them (default
	// 1). A stream or bucket that exists keeps its own: an operator may
	// have made it with 3 and Sparkles must not shrink it.
	Replicas int
	// Timeout bounds each request to the server, and an append from its
	// first publish to its state update, which runs to the end even if the
	// caller gives up, so no append is left half done (default 10s).
	Timeout time.Duration
	// StartTimeout bounds how long Open, and Bucket after it, keep asking a
	// JetStream that does not answer yet or says it is temporarily
	// unavailable: a cluster started beside the coordinators, electing its
	// leaders or its new stream's (default 60s). Any other refusal ends
	// Open at once.
	StartTimeout time.Duration
	Logger       *slog.Logger
	// Now stamps events appended without a ts (default time.Now).
	Now func() time.Time
	// NATSOptions are passed to nats.Connect: credentials, TLS, a name.
	NATSOptions []nats.Option
	// Observer is told of every append that made events durable; nil
	// observes nothing.
	Observer Observer
}

// Observer is told how many events one append made durable and how long it
// took, from its first publish to its state update. sync is always 0: the
// server's syncs are not seen from a client.
type Observer interface {
	Commit(events int, took, sync time.Duration)
}
