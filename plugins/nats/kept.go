package nats

import (
	"context"
	"errors"
	"fmt"

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
	st, err := s.jsAdmin.Stream(ctx, name)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	info, err := st.Info(ctx)
	if err != nil {
		return err
	}
	first, last := info.State.FirstSeq, info.State.LastSeq
	oldest := last + 1
	for _, i := range idx {
		oldest = min(oldest, msgs[i].Position.Sequence)
	}
	ids, err := s.msgIDs(ctx, name, max(oldest, first), last, info.State.Msgs == 0)
	if err != nil {
		return err
	}
	inPlace := false
	for _, i := range idx {
		if id, ok := ids[msgs[i].Position.Sequence]; ok && id == msgs[i].MsgID {
			kept[i], inPlace = true, true
		}
	}
	if inPlace {
		for _, i := range idx {
			if msgs[i].Position.Sequence < first {
				kept[i] = true
			}
		}
	}
	return nil
}

// msgIDs reads the Nats-Msg-Id of each message of stream from sequence
// from to to, by sequence (none when the stream is empty).
func (s *Sink) msgIDs(ctx context.Context, stream string, from, to uint64, empty bool) (map[uint64]string, error) {
	ids := map[uint64]string{}
	if from > to || empty {
		return ids, nil
	}
	c, err := s.jsAdmin.OrderedConsumer(ctx, stream, jetstream.OrderedConsumerConfig{
		DeliverPolicy: jetstream.DeliverByStartSequencePolicy,
		OptStartSeq:   from,
		HeadersOnly:   true,
	})
	if err != nil {
		return nil, err
	}
	it, err := c.Messages()
	if err != nil {
		return nil, err
	}
	defer it.Stop()
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
		if seq > to {
			return ids, nil
		}
		ids[seq] = m.Headers().Get(jetstream.MsgIDHeader)
		if seq == to || md.NumPending == 0 {
			return ids, nil
		}
	}
}
