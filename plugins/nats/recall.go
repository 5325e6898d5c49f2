package nats

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/switchyard-router/switchyard"
)

// After an unclean stop the router publishes again the events it had not
// marked delivered, among them those whose acknowledgement the crash cut
// off: the stream stored them, the router did not record it. The stream's
// duplicates window drops such a resend only if the restart came within
// it, and on the embedded server that window is short, because nats-server
// holds every id of it in the router's memory
// (docs/decisions/dedup-window.md). So the sink reads back what its streams
// stored just before the stop (ReadBack), the engine asks which of its
// recorded deliveries they kept (Kept, which also takes those out of what
// was read back), and what is left, stored but never recorded, answers a
// publish of the same message id as the window would (Recall): with where
// the stream holds it, without sending it again.

// recallFor is how long Recall answers from what was read back: the events
// it stands for are at the head of their queues and go out in the first
// rounds after the start; nats-server's own default duplicates window.
const recallFor = 2 * time.Minute

// readBack is what ReadBack read, by stream, until Recall takes it.
type readBack struct {
	mu    sync.Mutex
	tails map[string]*tail // nil outside a read-back
}

// recalled is where the streams hold the messages Recall answers for, by
// message id, until a time.
type recalled struct {
	mu    sync.Mutex
	at    map[string]recalledMsg
	until time.Time
}

// recalledMsg is one message of recalled.
type recalledMsg struct {
	subject string
	pos     switchyard.Position
}

// ReadBack reads the Nats-Msg-Id of every message each of the sink's
// streams stored in the last window before its newest one (headers only),
// for Kept and Recall. It must run before anything is published again.
func (s *Sink) ReadBack(ctx context.Context, window time.Duration) error {
	s.back.mu.Lock()
	defer s.back.mu.Unlock()
	s.back.tails = map[string]*tail{}
	if s.js == nil {
		return nil // core NATS: no acknowledgement, nothing to recall
	}
	for _, st := range s.streams {
		t, err := s.tailSince(ctx, st.Name, window)
		if err != nil {
			return fmt.Errorf("%s: stream %s: %w", s.name, st.Name, err)
		}
		if t != nil {
			s.back.tails[st.Name] = t
		}
	}
	return nil
}

// Recall ends a read-back: for the next recallFor, a publish of a message
// it found, and Kept did not find in place of a recorded delivery, is
// answered with where the stream holds it instead of being sent again,
// provided it goes to the same subject. It says how many messages it
// recalls.
func (s *Sink) Recall() int {
	s.back.mu.Lock()
	tails := s.back.tails
	s.back.tails = nil
	s.back.mu.Unlock()
	r := &recalled{at: map[string]recalledMsg{}, until: time.Now().Add(recallFor)}
	for name, t := range tails {
		for seq, m := range t.at {
			if m.id != "" {
				r.at[m.id] = recalledMsg{m.subject, switchyard.Position{Stream: name, Sequence: seq}}
			}
		}
	}
	if len(r.at) == 0 {
		s.recall.Store(nil)
		return 0
	}
	s.recall.Store(r)
	return len(r.at)
}

// recalledAt is where a stream already holds m, if Recall answers for it;
// each message is answered once.
func (s *Sink) recalledAt(m *switchyard.Message) (switchyard.Position, bool) {
	r := s.recall.Load()
	if r == nil {
		return switchyard.Position{}, false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if time.Now().After(r.until) {
		s.recall.CompareAndSwap(r, nil)
		return switchyard.Position{}, false
	}
	got, ok := r.at[m.MsgID]
	if !ok || got.subject != m.Topic {
		return switchyard.Position{}, false
	}
	delete(r.at, m.MsgID)
	if len(r.at) == 0 {
		s.recall.CompareAndSwap(r, nil)
	}
	return got.pos, true
}
