package nats

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchyard-router/switchyard"
)

// consumerCheckEvery is how often a running inbox reads its durable's
// configuration back: someone else (nats consumer edit, another
// program) may change it, and a changed filter makes the server pass over
// the inbox's messages for good. (A var: tests shorten it.)
var consumerCheckEvery = 10 * time.Second

// replayFetch is how many messages one fetch of a replay takes.
const replayFetch = 1000

// consumerDrift lists how the durable's configuration on the server, got,
// differs from the inbox's, want, in what loses the inbox's messages: the
// filter (the server passes over the others), max_deliver (it gives them
// up), the ack policy, a pause. Not ack_wait and max_ack_pending: routers
// on one durable with different batch sizes set those each their own way
// (a review: two such routers set them back in turn for ever, each
// reading the stream again), and a change of them loses nothing.
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
	differs("max_deliver", want.MaxDeliver, got.Config.MaxDeliver)
	if got.Paused {
		d = append(d, "paused")
	}
	return d
}

// replayRange is a range of stream sequences of the inbox's subject to
// read again: from on, up to upTo.
type replayRange struct{ from, upTo uint64 }

// checkConsumer reads the durable back, at most every consumerCheckEvery.
// Changed by someone else, it is set back to the inbox's configuration,
// and the messages of the inbox's subject after what the durable had
// delivered at the last check that found it as it should be, up to what it
// delivered since, are handed to receive again (replay): those the server
// may have passed over while it was changed. The inbox drops the ones it
// has. A replay cut short (the server gone, receive refusing) is owed and
// goes on at the next check, which still reads the durable back; one the
// server refuses (a work-queue stream takes no second consumer) is given
// up, logged.
func (s *Source) checkConsumer(ctx context.Context, receive func(context.Context, []switchyard.Inbound) error) {
	if time.Since(s.consumerCheckedAt) < consumerCheckEvery {
		return
	}
	s.consumerCheckedAt = time.Now()
	if s.owed != nil {
		s.replayOwed(ctx, receive)
	}
	info, err := s.consumer().Info(ctx)
	if err != nil {
		return // a pull says why
	}
	drift := consumerDrift(s.ccfg, info)
	if len(drift) == 0 {
		if s.owed == nil {
			// As it should be, nothing owed: its floor is past nothing
			// passed over (a changed durable's may be: a review).
			s.goodDelivered, s.floor = info.Delivered.Stream, info.AckFloor.Stream
			s.keepFloor(ctx)
		}
		return
	}
	if err := s.ensureConsumer(ctx); err != nil {
		if held, ok := s.driftLog.Take("set back", time.Now()); ok {
			s.log.Error("the inbox's durable consumer was changed by someone else, and it cannot be set back (said at most once a minute; delete it to have the inbox make it again)",
				"durable", s.ccfg.Durable, "changed", strings.Join(drift, "; "), "error", err, "like_it_since_last", held)
		}
		return
	}
	// What the durable delivered after the set-back: a pull under the
	// changed filter between the read and the set-back moved it on too.
	upTo := max(info.Delivered.Stream, s.consumer().CachedInfo().Delivered.Stream)
	if s.owed != nil { // a replay still owed: one range covers both
		upTo = max(upTo, s.owed.upTo)
	}
	s.owed = &replayRange{from: s.goodDelivered + 1, upTo: upTo}
	s.log.Error("the inbox's durable consumer was changed by someone else: set back to the inbox's configuration, and the messages of its subject the server may have passed over meanwhile are read again (the inbox drops those it has)",
		"durable", s.ccfg.Durable, "stream", s.Stream(), "changed", strings.Join(drift, "; "), "from_stream_seq", s.owed.from, "to_stream_seq", upTo)
	s.replayOwed(ctx, receive)
}

// replayOwed reads the owed range again, or what is left of it.
func (s *Source) replayOwed(ctx context.Context, receive func(context.Context, []switchyard.Inbound) error) {
	r := s.owed
	if r.upTo < r.from {
		s.owed = nil
		return
	}
	next, n, err := s.replay(ctx, receive, *r)
	if apiErr := (*jetstream.APIError)(nil); errors.As(err, &apiErr) && n == 0 && next == r.from {
		// The server refuses the replay's consumer (a work-queue stream
		// takes no second one on a subject): it will not take it later.
		s.owed = nil
		s.log.Error("cannot read again what a changed durable may have passed over: the server refuses a consumer to read it with; the messages in the range may be lost",
			"durable", s.ccfg.Durable, "from_stream_seq", r.from, "to_stream_seq", r.upTo, "error", err)
		return
	}
	if err != nil {
		r.from = next
		s.log.Warn("could not read again all a changed durable may have passed over; going on at the next check",
			"durable", s.ccfg.Durable, "handed_over", n, "from_stream_seq", next, "to_stream_seq", r.upTo, "error", err)
		return
	}
	s.owed = nil
	s.log.Info("read again what the changed durable may have passed over", "durable", s.ccfg.Durable, "messages", n)
}

// replay hands receive the messages of the inbox's subject with stream
// sequences r.from..r.upTo, read through an ephemeral consumer of its own
// (nothing to acknowledge; deleted after, or by the server a minute after
// its last use), in batches of the inbox's batch size. It returns the
// sequence to go on from and how many it handed over; an error when the
// server or receive stopped it.
func (s *Source) replay(ctx context.Context, receive func(context.Context, []switchyard.Inbound) error, r replayRange) (next uint64, n int, err error) {
	stream := s.Stream()
	cons, err := s.js.CreateConsumer(ctx, stream, jetstream.ConsumerConfig{
		Description:       "switchyard inbox " + s.name + ": reading again what a changed durable passed over",
		FilterSubject:     s.ccfg.FilterSubject,
		DeliverPolicy:     jetstream.DeliverByStartSequencePolicy,
		OptStartSeq:       r.from,
		AckPolicy:         jetstream.AckNonePolicy,
		InactiveThreshold: time.Minute,
	})
	if err != nil {
		return r.from, 0, err
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
		_ = s.js.DeleteConsumer(dctx, stream, cons.CachedInfo().Name)
	}()
	next = r.from
	for ctx.Err() == nil {
		msgs, done, err := s.replayBatch(ctx, cons, r.upTo)
		if err != nil {
			return next, n, err
		}
		for len(msgs) > 0 {
			chunk := msgs[:min(len(msgs), max(s.batch, 1))]
			in := make([]switchyard.Inbound, len(chunk))
			for i, m := range chunk {
				in[i] = s.decode(m)
			}
			if err := receive(ctx, in); err != nil {
				return next, n, fmt.Errorf("the inbox did not take a batch read again: %w", err)
			}
			n += len(in)
			if md, err := chunk[len(chunk)-1].Metadata(); err == nil {
				next = md.Sequence.Stream + 1
			}
			msgs = msgs[len(chunk):]
		}
		if done {
			return next, n, nil
		}
	}
	return next, n, ctx.Err()
}

// replayBatch fetches the next messages of a replay, up to upTo; done when
// the range is read.
func (s *Source) replayBatch(ctx context.Context, cons jetstream.Consumer, upTo uint64) (msgs []jetstream.Msg, done bool, err error) {
	fctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	mb, err := cons.Fetch(replayFetch, jetstream.FetchContext(fctx))
	if err != nil {
		return nil, false, err
	}
	got, err := collect(mb)
	if err != nil {
		return nil, false, err
	}
	for i, m := range got {
		if md, err := m.Metadata(); err == nil && md.Sequence.Stream > upTo {
			return got[:i], true, nil
		}
	}
	return got, len(got) == 0, nil
}
