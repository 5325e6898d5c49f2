package nats

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchyard-router/switchyard"
)

var _ switchyard.Keeper = (*Sink)(nil)

// Kept tells which acknowledged messages their streams still hold
// (switchyard.Keeper), so that a republish after an unclean stop sends only
// what a power cut took (docs/decisions/power-loss.md). It must run before
// the router publishes again (cmd/router starts the loops after it). A file
// stream loses what it had not synced: its newest messages, and since its
// block files are flushed in no set order, possibly the tail of an older
// block too, which recovery leaves as a gap of deleted sequences. So,
// stream by stream:
//   - a sequence past the stream's last, or one the stream lists as deleted,
//     was lost;
//   - one before its first was kept, then removed by the stream's limits;
//   - otherwise a message is at that sequence. Reading newest first, the
//     first that carries the recorded Nats-Msg-Id (ids are unique per
//     output) proves that sequence was never reused, and with it every
//     older recorded sequence that holds a message: a sequence can be reused
//     only above the stream's last one after the cut. Those newer than the
//     first match hold another publisher's messages: lost.
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
	info, err := st.Info(ctx, jetstream.WithDeletedDetails(true))
	if err != nil {
		return err
	}
	first, last := info.State.FirstSeq, info.State.LastSeq
	deleted := make(map[uint64]bool, len(info.State.Deleted))
	for _, seq := range info.State.Deleted {
		deleted[seq] = true
	}
	seqOf := func(i int) uint64 { return msgs[i].Position.Sequence }
	slices.SortStableFunc(idx, func(a, b int) int { return cmp.Compare(seqOf(b), seqOf(a)) })
	recorded := make(map[uint64]int, len(idx)) // outputs recorded per sequence
	for _, i := range idx {
		recorded[seqOf(i)]++
	}
	var proven uint64 // the sequence of the first match; 0 = none yet
	for _, i := range idx {
		seq := seqOf(i)
		switch {
		case seq > last || deleted[seq]:
			continue
		case seq < first:
			kept[i] = true
			continue
		case proven != 0 && recorded[seq] == 1:
			kept[i] = seq < proven
			continue
		}
		// Read the message: no match yet, or two outputs recorded at one
		// sequence (which the router does not do; then only the one whose id
		// is there was kept).
		m, err := st.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			return err
		}
		if m.Header.Get(jetstream.MsgIDHeader) == msgs[i].MsgID {
			kept[i] = true
			proven = max(proven, seq)
		}
	}
	return nil
}
