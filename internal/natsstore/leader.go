package natsstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Reads through a stream's leader (the message-get API), which has every
// write the stream acknowledged, where a replica that answers a direct get
// may be behind: leaderKV for the buckets, leaderNext for the log.

// leaderKV is a bucket whose Get believes a not found only once the
// stream's leader says it too. kv.Get is a direct get, which any replica
// of the bucket may answer, and one that has not caught up yet answers
// "not found" for a key written a moment ago: a state another process
// just created (the store then forgot the sandbox, and an append answered
// not_found), or a node that just registered (a claim then took a live
// node's lease). The leader holds every write the bucket acknowledged;
// its not found, or a delete marker, is one. Every bucket the store opens
// is one of these, the cluster's too (Bucket).
type leaderKV struct {
	jetstream.KeyValue
	s *Store
}

func (kv leaderKV) Get(ctx context.Context, key string) (jetstream.KeyValueEntry, error) {
	var kve jetstream.KeyValueEntry
	var err error = jetstream.ErrKeyNotFound
	if !kv.s.hooks.Load().isLagging(key) {
		kve, err = kv.KeyValue.Get(ctx, key)
	}
	if !errors.Is(err, jetstream.ErrKeyNotFound) {
		return kve, err
	}
	return kv.s.leaderGet(ctx, kv.Bucket(), key)
}

// leaderGet reads the last message of a key's subject through the stream's
// leader (the message-get API, not the direct get).
func (s *Store) leaderGet(ctx context.Context, bucket, key string) (jetstream.KeyValueEntry, error) {
	m, err := s.leaderMsg(ctx, "KV_"+bucket, leaderRequest{LastFor: "$KV." + bucket + "." + key})
	if err != nil {
		return nil, fmt.Errorf("get %s from the leader: %w", key, err)
	}
	if m == nil {
		return nil, jetstream.ErrKeyNotFound
	}
	if len(m.Header) > 0 {
		h, err := nats.DecodeHeadersMsg(m.Header)
		if err != nil {
			return nil, fmt.Errorf("get %s from the leader: %w", key, err)
		}
		if op := h.Get("KV-Operation"); op == "DEL" || op == "PURGE" {
			return nil, jetstream.ErrKeyNotFound
		}
	}
	return leaderEntry{bucket: bucket, key: key, value: m.Data, rev: m.Sequence, created: m.Time}, nil
}

// leaderNext reads the first message of subject with a sequence >= from
// from the log's leader, as a direct get reply would carry it; nil if
// there is none.
func (s *Store) leaderNext(ctx context.Context, subject string, from uint64) (*nats.Msg, uint64, error) {
	m, err := s.leaderMsg(ctx, s.streamName, leaderRequest{Seq: from, NextFor: subject})
	if err != nil || m == nil {
		return nil, 0, err
	}
	msg := nats.NewMsg(subject)
	msg.Data = m.Data
	msg.Header.Set(jetstream.SequenceHeader, strconv.FormatUint(m.Sequence, 10))
	msg.Header.Set(jetstream.SubjectHeader, m.Subject)
	return msg, m.Sequence, nil
}

// leaderRequest asks the message-get API for the last message of a subject
// (LastFor) or the first one at or after a sequence (Seq, NextFor).
type leaderRequest struct {
	Seq     uint64 `json:"seq,omitempty"`
	NextFor string `json:"next_by_subj,omitempty"`
	LastFor string `json:"last_by_subj,omitempty"`
}

// leaderMessage is a message as the message-get API returns it.
type leaderMessage struct {
	Subject  string    `json:"subject"`
	Sequence uint64    `json:"seq"`
	Header   []byte    `json:"hdrs"`
	Data     []byte    `json:"data"`
	Time     time.Time `json:"time"`
}

// leaderMsg asks stream's leader for one message (the message-get API,
// which the leader answers, unlike a direct get); nil when there is none.
func (s *Store) leaderMsg(ctx context.Context, stream string, req leaderRequest) (*leaderMessage, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	msg, err := s.nc.RequestWithContext(ctx, "$JS.API.STREAM.MSG.GET."+stream, body)
	if err != nil {
		return nil, err
	}
	var resp struct {
		Message *leaderMessage      `json:"message"`
		Error   *jetstream.APIError `json:"error"`
	}
	if err := json.Unmarshal(msg.Data, &resp); err != nil {
		return nil, err
	}
	if resp.Error != nil {
		if resp.Error.ErrorCode == jetstream.JSErrCodeMessageNotFound {
			return nil, nil
		}
		return nil, resp.Error
	}
	if resp.Message == nil {
		return nil, errors.New("an answer with no message")
	}
	return resp.Message, nil
}

// leaderEntry is a value leaderGet read.
type leaderEntry struct {
	bucket, key string
	value       []byte
	rev         uint64
	created     time.Time
}

func (e leaderEntry) Bucket() string                  { return e.bucket }
func (e leaderEntry) Key() string                     { return e.key }
func (e leaderEntry) Value() []byte                   { return e.value }
func (e leaderEntry) Revision() uint64                { return e.rev }
func (e leaderEntry) Created() time.Time              { return e.created }
func (e leaderEntry) Delta() uint64                   { return 0 }
func (e leaderEntry) Operation() jetstream.KeyValueOp { return jetstream.KeyValuePut }
