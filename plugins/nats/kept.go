package nats

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchyard-router/switchyard"
)

var _ switchyard.Keeper = (*Sink)(nil)

// Kept tells which acknowledged messages their streams still hold
// (switchyard.Keeper), so that a republish after an unclean stop sends only
// what a power cut took (docs/decisions/power-loss.md). It must run before
// the router publishes again (cmd/router starts the loops after it).
//
// A stream is not asked to infer: Kept reads the Nats-Msg-Id of every
// message from the oldest recorded sequence on (an ordered consumer, headers
// only) and a message was kept if its recorded sequence holds its id. A
// power cut can take the newest messages and, since block files are flushed
// in no set order, the tail of an older block; another client may have
// filled sequences the cut freed; reading each one covers all of these.
// The only inference: a recorded sequence below the stream's first was
// removed by the stream's limits, so it counts as kept — when some recorded
// message at or above the first was found in place (proving that the
// sequences below it were not given out again).
//
// Between ReadBack and Recall it reads from what ReadBack read where that
// reaches back far enough, and drops from it the messages it found in
// place: those the router recorded need no recall.
//
// A message without a position (core NATS), in a stream that is gone, or on
// a server without JetStream counts as lost.
func (s *Sink) Kept(ctx context.Context, msgs []switchyard.Acked) ([]bool, error) {
	kept := make([]bool, len(msgs))
	if s.jsAdmin == nil {
		return kept, nil
	}
	byStream := map[string][]int{}
	for i, m := range msgs {
		if m.Position.Stream != "" && m.Position.Sequence > 0 {
			byStream[m.Position.Stream] = append(byStream[m.Position.Stream], i)
		}
	}
	for name, idx := range byStream {
		if err := s.keptIn(ctx, name, msgs, idx, kept); err != nil {
			return nil, fmt.Errorf("%s: stream %s: %w", s.name, name, err)
		}
	}
	return kept, nil
}

// keptIn sets kept[i] for the messages msgs[i], i in idx, that stream name
// holds.
func (s *Sink) keptIn(ctx context.Context, name string, msgs []switchyard.Acked, idx []int, kept []bool) error {
	oldest := uint64(1<<64 - 1)
	for _, i := range idx {
		oldest = min(oldest, msgs[i].Position.Sequence)
	}
	t, err := s.tailFrom(ctx, name, oldest)
	if err != nil || t == nil {
		return err // a stream that is gone kept nothing
	}
	inPlace := false
	for _, i := range idx {
		seq := msgs[i].Position.Sequence
		if m, ok := t.at[seq]; ok && m.id == msgs[i].MsgID {
			kept[i], inPlace = true, true
			delete(t.at, seq) // recorded: nothing to recall
		}
	}
	if inPlace {
		for _, i := range idx {
			if msgs[i].Position.Sequence < t.first {
				kept[i] = true
			}
		}
	}
	return nil
}

// tail is what a stream held, from sequence from to its last, when it was
// read: the id and subject of the message at each sequence (a sequence
// deleted or lost has none).
type tail struct {
	first, from, last uint64 // the stream's first sequence then, and the span read
	at                map[uint64]stored
}

// stored is one message a tail holds.
type stored struct{ id, subject string }

// tailFrom is stream name's tail from sequence from (or its first, if
// later) on: what ReadBack read, if that reaches back so far, or else read
// now (and kept for Recall while a ReadBack is in progress). It is nil for
// a stream that does not exist.
func (s *Sink) tailFrom(ctx context.Context, name string, from uint64) (*tail, error) {
	s.back.mu.Lock()
	defer s.back.mu.Unlock()
	if t, ok := s.back.tails[name]; ok && (t.from <= from || t.from <= t.first) {
		return t, nil
	}
	t, err := s.readTail(ctx, name, func(first uint64) jetstream.OrderedConsumerConfig {
		return jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: max(from, first)}
	})
	if err == nil && t != nil && s.back.tails != nil {
		s.back.tails[name] = t
	}
	return t, err
}

// tailSince is stream name's tail from window (and a second more) before
// its newest message on (nil if the stream does not exist). The second is
// for Kept: the router's record of a delivery is a little younger than the
// message it records, and Kept reads no more when this reaches back to the
// oldest delivery it is asked about.
func (s *Sink) tailSince(ctx context.Context, name string, window time.Duration) (*tail, error) {
	st, err := s.jsAdmin.Stream(ctx, name)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	since := st.CachedInfo().State.LastTime.Add(-window - time.Second)
	return s.readTail(ctx, name, func(uint64) jetstream.OrderedConsumerConfig {
		return jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverByStartTimePolicy, OptStartTime: &since}
	})
}

// readTail reads the Nats-Msg-Id and subject of each message of stream
// name from where start says (given the stream's first sequence) to its
// last (an ordered consumer, headers only). It is nil for a stream that
// does not exist.
func (s *Sink) readTail(ctx context.Context, name string, start func(first uint64) jetstream.OrderedConsumerConfig) (*tail, error) {
	st, err := s.jsAdmin.Stream(ctx, name)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	info, err := st.Info(ctx)
	if err != nil {
		return nil, err
	}
	first, last := info.State.FirstSeq, info.State.LastSeq
	cfg := start(first)
	t := &tail{first: first, from: max(cfg.OptStartSeq, first), last: last, at: map[uint64]stored{}}
	if info.State.Msgs == 0 || t.from > last {
		t.from = last + 1
		return t, nil
	}
	cfg.HeadersOnly = true
	c, err := s.jsAdmin.OrderedConsumer(ctx, name, cfg)
	if err != nil {
		return nil, err
	}
	it, err := c.Messages()
	if err != nil {
		return nil, err
	}
	defer it.Stop()
	began := time.Now()
	defer func() {
		s.log.Debug("read back message ids", "stream", name, "from", t.from, "to", t.last, "messages", len(t.at), "took", time.Since(began))
	}()
	for {
		m, err := it.Next(jetstream.NextContext(ctx))
		if err != nil {
			return nil, err
		}
		md, err := m.Metadata()
		if err != nil {
			return nil, err
		}
		seq := md.Sequence.Stream
		if seq > last {
			return t, nil
		}
		if len(t.at) == 0 && cfg.DeliverPolicy == jetstream.DeliverByStartTimePolicy {
			t.from = seq // by time, the first message found starts the span
		}
		t.at[seq] = stored{m.Headers().Get(jetstream.MsgIDHeader), m.Subject()}
		if seq == last || md.NumPending == 0 {
			return t, nil
		}
	}
}
