package nats

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchyard-router/switchyard"
	"github.com/switchyard-router/switchyard/cloudevents"
)

var _ switchyard.Keeper = (*Sink)(nil)

// Kept tells which acknowledged messages their streams still hold, and
// lists the other messages the sink's streams stored within window before
// their newest (switchyard.Keeper), so that after an unclean stop the
// router republishes only what a power cut took
// (docs/decisions/power-loss.md) and does not send again what the stream
// stored while the crash cut off its acknowledgement
// (docs/decisions/dedup-window.md). It must run before the router publishes
// again (cmd/router starts the loops after it).
//
// A stream is not asked to infer: Kept reads the Nats-Msg-Id and subject of
// every message from window before the newest, or from the oldest recorded
// sequence if that is older (an ordered consumer, headers only), and a
// message was kept if its recorded sequence holds its id. A power cut can
// take the newest messages and, since block files are flushed in no set
// order, the tail of an older block; another client may have filled
// sequences the cut freed; reading each one covers all of these. The only
// inference: a recorded sequence below the stream's first was removed by
// the stream's limits, so it counts as kept — when some recorded message at
// or above the first was found in place (proving that the sequences below
// it were not given out again).
//
// A message without a position (core NATS), in a stream that is gone, or on
// a server without JetStream counts as lost.
func (s *Sink) Kept(ctx context.Context, msgs []switchyard.Acked, window time.Duration) ([]bool, []switchyard.Stored, error) {
	kept := make([]bool, len(msgs))
	if s.jsAdmin == nil {
		return kept, nil, nil
	}
	byStream := map[string][]int{}
	for _, st := range s.declared() {
		byStream[st.Name] = nil
	}
	for i, m := range msgs {
		if m.Position.Stream != "" && m.Position.Sequence > 0 {
			byStream[m.Position.Stream] = append(byStream[m.Position.Stream], i)
		}
	}
	var others []switchyard.Stored
	for _, name := range slices.Sorted(maps.Keys(byStream)) {
		o, err := s.keptIn(ctx, name, msgs, byStream[name], kept, window)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: stream %s: %w", s.name, name, err)
		}
		others = append(others, o...)
	}
	return kept, others, nil
}

// keptIn sets kept[i] for the messages msgs[i], i in idx, that stream name
// holds, and returns what else it read of the stream. Nothing of the
// stream is gathered but those others: a crash under load leaves hundreds
// of thousands of messages in the window (docs/decisions/memory-limit.md).
func (s *Sink) keptIn(ctx context.Context, name string, msgs []switchyard.Acked, idx []int, kept []bool, window time.Duration) ([]switchyard.Stored, error) {
	m := &matcher{stream: name, msgs: msgs, idx: idx, kept: kept}
	slices.SortFunc(idx, func(a, b int) int { return cmp.Compare(msgs[a].Position.Sequence, msgs[b].Position.Sequence) })
	first, err := s.readBack(ctx, name, m.oldest(), window, m.see)
	if err != nil || first == 0 {
		return nil, err // a stream that is gone kept nothing
	}
	if m.inPlace {
		for _, i := range idx {
			if msgs[i].Position.Sequence < first {
				kept[i] = true
			}
		}
	}
	return m.others, nil
}

// matcher sets kept[i] for each recorded message msgs[i], i in idx (in the
// order of their sequences), that a message read of the stream is, and
// keeps the others read.
type matcher struct {
	stream  string
	msgs    []switchyard.Acked
	idx     []int
	kept    []bool
	inPlace bool // a recorded message was found where it was recorded
	others  []switchyard.Stored
}

// oldest is the lowest recorded sequence (0 for none).
func (m *matcher) oldest() uint64 {
	if len(m.idx) == 0 {
		return 0
	}
	return m.msgs[m.idx[0]].Position.Sequence
}

// see is one message read at seq.
func (m *matcher) see(seq uint64, st stored) {
	at, _ := slices.BinarySearchFunc(m.idx, seq, func(i int, seq uint64) int { return cmp.Compare(m.msgs[i].Position.Sequence, seq) })
	recorded := false
	for _, i := range m.idx[at:] {
		if m.msgs[i].Position.Sequence != seq {
			break
		}
		if m.msgs[i].MsgID == st.id {
			m.kept[i], m.inPlace, recorded = true, true, true
		}
	}
	if !recorded && st.id != "" {
		m.others = append(m.others, switchyard.Stored{Topic: st.subject, MsgID: st.id, Position: switchyard.Position{Stream: m.stream, Sequence: seq},
			Time: st.time, EventID: cloudevents.NATS.AttributeValue(st.ceID), Source: cloudevents.NATS.AttributeValue(st.ceSource)})
	}
}

// The headers of the CloudEvents id and source (cloudevents.NATS).
var (
	ceIDHeader     = cloudevents.NATS.Prefix() + "id"
	ceSourceHeader = cloudevents.NATS.Prefix() + "source"
)

// stored is one message read of a stream: its Nats-Msg-Id, subject, time,
// and ce-id and ce-source as they are on the wire.
type stored struct {
	id, subject    string
	time           time.Time
	ceID, ceSource string
}

// readBack passes see each message of stream name from window (and a
// second more) before its newest message, and further back to sequence
// oldest if that is older, and says which was the stream's first sequence
// then: 0 for a stream that does not exist. The second is for the
// recorded deliveries: the router's record of one is a little younger than
// the message it records.
func (s *Sink) readBack(ctx context.Context, name string, oldest uint64, window time.Duration, see func(uint64, stored)) (first uint64, err error) {
	st, err := s.jsAdmin.Stream(ctx, name)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	info, err := st.Info(ctx)
	if err != nil {
		return 0, err
	}
	first = max(info.State.FirstSeq, 1)
	if info.State.Msgs == 0 {
		return first, nil
	}
	last := info.State.LastSeq
	since := info.State.LastTime.Add(-window - time.Second)
	from, err := s.readTail(ctx, name, jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverByStartTimePolicy, OptStartTime: &since}, last, see)
	if err != nil {
		return 0, err
	}
	if oldest > 0 {
		oldest = max(oldest, first)
	}
	if oldest > 0 && oldest < from {
		_, err = s.readTail(ctx, name, jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: oldest}, from-1, see)
	}
	return first, err
}

// readBackStall is how long readTail waits for the next message.
const readBackStall = 10 * time.Second

// readTail passes see the Nats-Msg-Id and subject of each message of
// stream name from where cfg starts to sequence to (an ordered consumer,
// headers only), and says at which sequence it started (to+1 when there
// was nothing).
func (s *Sink) readTail(ctx context.Context, name string, cfg jetstream.OrderedConsumerConfig, to uint64, see func(uint64, stored)) (from uint64, err error) {
	from = to + 1
	began, n := time.Now(), 0
	defer func() {
		s.log.Debug("read back message ids", "stream", name, "from", from, "to", to, "messages", n, "took", time.Since(began))
	}()
	cfg.HeadersOnly = true
	c, err := s.jsAdmin.OrderedConsumer(ctx, name, cfg)
	if err != nil {
		return 0, err
	}
	it, err := c.Messages()
	if err != nil {
		return 0, err
	}
	defer it.Stop()
	for {
		// Bounded: messages removed after the stream's info was read would
		// otherwise leave it waiting for ever.
		next, cancel := context.WithTimeout(ctx, readBackStall)
		m, err := it.Next(jetstream.NextContext(next))
		cancel()
		if err != nil {
			return 0, fmt.Errorf("reading message ids after sequence %d: %w", max(from, cfg.OptStartSeq), err)
		}
		md, err := m.Metadata()
		if err != nil {
			return 0, err
		}
		seq := md.Sequence.Stream
		if seq > to {
			return from, nil
		}
		from = min(from, seq)
		h := m.Headers()
		see(seq, stored{h.Get(jetstream.MsgIDHeader), m.Subject(), md.Timestamp, h.Get(ceIDHeader), h.Get(ceSourceHeader)})
		n++
		if seq == to || md.NumPending == 0 {
			return from, nil
		}
	}
}
