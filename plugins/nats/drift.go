package nats

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchyard-router/switchyard"
	"github.com/switchyard-router/switchyard/internal/backoff"
)

// consumerCheckEvery is how often a running inbox reads its durable's
// configuration back: someone else (nats consumer edit, another
// program) may change it, and a changed filter makes the server pass over
// the inbox's messages for good. (A var: tests shorten it.)
var consumerCheckEvery = 10 * time.Second

// consumerDrift lists how the durable's configuration on the server, got,
// differs from the inbox's, want, in what decides which messages it gets
// and whether they come again; a paused consumer gets none.
func consumerDrift(want jetstream.ConsumerConfig, got *jetstream.ConsumerInfo) []string {
	var d []string
	differs := func(what string, w, g any) {
		if w != g {
			d = append(d, fmt.Sprintf("%s %v (the inbox's: %v)", what, g, w))
		}
	}
	differs("filter_subject", want.FilterSubject, got.Config.FilterSubject)
	if len(got.Config.FilterSubjects) > 0 {
		d = append(d, fmt.Sprintf("filter_subjects %v (the inbox's: %q alone)", got.Config.FilterSubjects, want.FilterSubject))
	}
	differs("ack_policy", want.AckPolicy, got.Config.AckPolicy)
	differs("ack_wait", want.AckWait, got.Config.AckWait)
	differs("max_deliver", want.MaxDeliver, got.Config.MaxDeliver)
	differs("max_ack_pending", want.MaxAckPending, got.Config.MaxAckPending)
	if got.Paused {
		d = append(d, "paused")
	}
	return d
}

// checkConsumer reads the durable back, at most every consumerCheckEvery.
// Changed by someone else, it is set back to the inbox's configuration,
// and the messages of the inbox's subject from after the last check that
// found it as it should be, up to what the server has delivered, are
// handed to receive again (replay): those the server passed over while
// it was changed. The inbox drops the ones it has already.
func (s *Source) checkConsumer(ctx context.Context, receive func(context.Context, []switchyard.Inbound) error) {
	if time.Since(s.checked) < consumerCheckEvery {
		return
	}
	s.checked = time.Now()
	info, err := s.consumer().Info(ctx)
	if err != nil {
		return // a pull says why
	}
	drift := consumerDrift(s.ccfg, info)
	if len(drift) == 0 {
		s.goodFloor = info.AckFloor.Stream
		return
	}
	from, upTo := s.goodFloor+1, info.Delivered.Stream
	s.log.Error("the inbox's durable consumer was changed by someone else: set back to the inbox's configuration, and the messages the server may have passed over meanwhile are read again (the inbox drops those it has)",
		"durable", s.ccfg.Durable, "stream", s.Stream(), "changed", strings.Join(drift, "; "), "from_stream_seq", from, "to_stream_seq", upTo)
	if err := s.ensureConsumer(ctx); err != nil {
		s.log.Error("cannot set the durable consumer back; trying again", "durable", s.ccfg.Durable, "error", err)
		s.checked = time.Time{}
		return
	}
	if upTo >= from {
		n, err := s.replay(ctx, receive, from, upTo)
		s.log.Info("read again what the changed consumer may have passed over", "messages", n, "error", err)
	}
}

// replay hands receive the messages of the inbox's subject with stream
// sequences from..upTo, through an ordered consumer of its own (nothing
// to acknowledge), each batch until receive takes it. It returns how many
// it handed over.
func (s *Source) replay(ctx context.Context, receive func(context.Context, []switchyard.Inbound) error, from, upTo uint64) (int, error) {
	oc, err := s.js.OrderedConsumer(ctx, s.Stream(), jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{s.ccfg.FilterSubject},
		DeliverPolicy:  jetstream.DeliverByStartSequencePolicy,
		OptStartSeq:    from,
	})
	if err != nil {
		return 0, err
	}
	n := 0
	for ctx.Err() == nil {
		mb, err := oc.Fetch(max(s.batch, 1), jetstream.FetchMaxWait(time.Second))
		if err != nil {
			return n, err
		}
		msgs, err := collect(mb)
		in := make([]switchyard.Inbound, 0, len(msgs))
		done := len(msgs) == 0 || err != nil
		for _, m := range msgs {
			if md, merr := m.Metadata(); merr == nil && md.Sequence.Stream > upTo {
				done = true
				break
			}
			in = append(in, s.decode(m))
		}
		var pause time.Duration
		for len(in) > 0 && ctx.Err() == nil {
			if rerr := receive(ctx, in); rerr == nil {
				break
			}
			pause = receiveBackoff.Next(pause)
			backoff.Sleep(ctx, pause)
		}
		n += len(in)
		if done {
			return n, err
		}
	}
	return n, ctx.Err()
}
