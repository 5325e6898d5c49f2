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
// what a power cut took (docs/decisions/power-loss.md). A file stream loses
// only its newest messages in a power cut: its blocks are written in
// sequence and recovery stops at the first record that does not check out.
// So, stream by stream:
//   - a sequence past the stream's last was lost;
//   - one before its first was kept, then removed by the stream's limits;
//   - otherwise the message at that sequence is read, newest first: it was
//     kept if it carries the same Nats-Msg-Id (ids are unique per output,
//     and a message the router published since has a sequence past the
//     recorded ones it replaced), and then every older one was kept with it.
//
// A message without a position (core NATS), in a stream that is gone, or at
// a sequence that holds another message or none counts as lost.
func (s *Sink) Kept(ctx context.Context, msgs []switchyard.Acked) ([]bool, error) {
	kept := make([]bool, len(msgs))
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
	slices.SortFunc(idx, func(a, b int) int {
		return cmp.Compare(msgs[b].Position.Sequence, msgs[a].Position.Sequence)
	})
	for j, i := range idx {
		seq := msgs[i].Position.Sequence
		switch {
		case seq > last:
			continue
		case seq < first:
			kept[i] = true
			continue
		}
		m, err := st.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			return err
		}
		if m.Header.Get(jetstream.MsgIDHeader) == msgs[i].MsgID {
			for _, k := range idx[j:] {
				kept[k] = true
			}
			return nil
		}
	}
	return nil
}
