package nats

import (
	"context"
	"encoding/binary"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchyard-router/switchyard"
)

// A durable deleted (by an operator, a tool, a stream's maintenance) was
// made again from the stream's start (deliver all): every message still
// in the stream came again, those the inbox took within its ttl were
// dropped, and every older one was handed to the service a second time.
// The source keeps the durable's ack floor as it reads the durable back
// (setup, checkConsumer), every message of its subject up to the floor
// acknowledged, so stored; each batch's Read carries the sequence after
// it, which the inbox keeps in the data file with the batch. A durable
// made again reads on from there, when the stream is the one it was (the
// same creation time: a stream made again begins its sequences again).
// docs/decisions/inbox-offsets.md.

// streamIDOf is what tells a stream from one made again under its name:
// its creation time; zero when its info could not be read (then nothing
// kept matches, and a durable made again reads from the start).
func streamIDOf(st *jetstream.StreamInfo) (id [16]byte) {
	if st != nil {
		binary.BigEndian.PutUint64(id[:], uint64(st.Created.UnixNano()))
	}
	return id
}

// adoptStart takes the durable's deliver policy and start from got (the
// server's): they are fixed when it is made, and an update that changed
// them would be refused.
func (s *Source) adoptStart(got jetstream.ConsumerConfig) {
	s.ccfg.DeliverPolicy, s.ccfg.OptStartSeq, s.ccfg.OptStartTime = got.DeliverPolicy, got.OptStartSeq, got.OptStartTime
}

// startMadeAgain sets where the inbox's durable, gone from stream (st: its
// info, nil when unreadable), is made again: after the ack floor the
// source last read from it, or the data file kept, when of this stream;
// else from the stream's start (also when the stream cannot be told from
// one made again: its info unreadable). A work-queue stream takes only
// deliver-all durables, and keeps only what was not acknowledged: from
// its start. why is how the source found it gone (nil: at setup). It
// returns what tells which, once the durable is made (made then keeps
// the stream's id with its floor).
func (s *Source) startMadeAgain(stream string, st *jetstream.StreamInfo, why error) (tell func()) {
	id := streamIDOf(st)
	known := id != [16]byte{}
	var next uint64
	if known && s.streamID == id && s.floor > 0 {
		next = s.floor + 1
	}
	kept, ok, err := s.keptRead(stream)
	if err != nil {
		s.log.Warn("cannot read where the inbox got to in the stream", "durable", s.ccfg.Durable, "stream", stream, "error", err)
	}
	again := ok && kept.ID != id // the stream made again since the inbox read it (or not known)
	if ok && known && !again {
		next = max(next, uint64(max(kept.Next, 0)))
	}
	workQueue := st != nil && st.Config.Retention == jetstream.WorkQueuePolicy
	if st != nil && next > st.State.LastSeq+1 {
		// Past the stream's end: its sequences went back (a snapshot
		// restored keeps the creation time), and the server would not
		// clamp the start: messages below it would never be read.
		again, next = true, 0
	}
	s.resetStart()
	durable := s.ccfg.Durable
	switch {
	case next > 0 && !workQueue:
		s.ccfg.DeliverPolicy, s.ccfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, next
		return func() {
			s.log.Warn("the inbox's durable consumer was gone (deleted): made again, reading on after what it had acknowledged (messages after that which the inbox has are dropped)",
				"durable", durable, "stream", stream, "from_stream_seq", next, "error", why)
		}
	case !workQueue && (again || ok && !known):
		return func() {
			s.log.Warn("the inbox's durable consumer was gone, and its stream was made again since the inbox read it (or cannot be told from one: its info unreadable): made again from the stream's start",
				"durable", durable, "stream", stream, "error", why)
		}
	case why != nil:
		return func() {
			s.log.Warn("durable consumer gone; made again from the stream's start (the inbox drops what it remembers; a work-queue stream keeps only what was not acknowledged)", "durable", durable, "stream", stream, "error", why)
		}
	}
	return func() {}
}

// resetStart makes the durable, if it must be made, read from the
// stream's start: the safe default where nothing better is known (a
// durable that exists keeps its own: adoptStart).
func (s *Source) resetStart() {
	s.ccfg.DeliverPolicy, s.ccfg.OptStartSeq, s.ccfg.OptStartTime = jetstream.DeliverAllPolicy, 0, nil
}

// made notes the durable just made or found on the stream of id: its ack
// floor, with the id it is of (together: a floor of another stream's
// durable would skip the first messages of this one, a review).
func (s *Source) made(id [16]byte) {
	s.streamID, s.floor = id, s.consumer().CachedInfo().AckFloor.Stream
}

// keepFloor has the data file keep where a durable made again would read
// on from (the source's floor), when a check has read a new one: the last
// batch before a stop carried the floor from before it (a review: read
// again after the durable was deleted).
func (s *Source) keepFloor(ctx context.Context) {
	if s.keep == nil || s.floor == s.keptFloor {
		return
	}
	if err := s.keep(ctx, switchyard.Read{Topic: s.stream, Next: int64(s.floor) + 1, ID: s.streamID}); err != nil {
		s.log.Warn("cannot keep where the inbox got to in the stream", "durable", s.ccfg.Durable, "stream", s.stream, "error", err)
		return
	}
	s.keptFloor = s.floor
}

// keptRead is what the data file kept of the inbox's reading of stream.
func (s *Source) keptRead(stream string) (r switchyard.Read, ok bool, err error) {
	if s.kept == nil {
		return r, false, nil
	}
	return s.kept(stream, 0)
}
