package switchyard

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Message is one output of an event, ready for a sink. Sinks map it onto
// their CloudEvents binding (NATS ce-* headers, Kafka ce_* headers).
type Message struct {
	// Event is the event as the pipeline left it; Data is the payload.
	Event *Event
	// Topic is the Kafka topic or the NATS subject on the sink (a
	// Destination's second half: "kafka.main:orders" → "orders").
	Topic string
	// Key is the partition key (Kafka record key); "" = none.
	Key string
	// MsgID is unique per output: the event id, or "<id>/<N>/" for the
	// Nth output after the first when one event yields several
	// (storage.Record.OutputMsgID; JetStream Nats-Msg-Id).
	MsgID string
}

// Result is a sink's answer for one Message.
type Result struct {
	// Position is where the broker stored the message, when Err is nil.
	Position Position
	// Err is nil when the broker acknowledged the message. Wrap it with
	// Permanent when retrying cannot help (record too large, not authorized).
	Err error
	// RetryAfter, with a retryable Err, is the earliest the receiver wants
	// the message again (an HTTP Retry-After); the engine waits at least
	// this long, or its backoff if that is longer. With an Err wrapping
	// ErrSinkUnavailable (a receiver that asks for a pause) it waits this
	// long at least, counting no attempt. At most MaxRetryAfter.
	RetryAfter time.Duration
}

// MaxRetryAfter bounds the wait a receiver's Retry-After asks for: a
// service once asked for 3,000 years, and held the event, and with
// ordering = "key" its key, for ever.
const MaxRetryAfter = 24 * time.Hour

// Sink publishes messages to a broker. The engine knows sinks only through
// this interface; plugins/nats and plugins/kafka implement it.
type Sink interface {
	// Name is how routes refer to the sink: "nats.local", "kafka.main".
	Name() string
	// Publish sends msgs and waits for every broker acknowledgement. It
	// returns exactly one Result per message, in order. It must return once
	// ctx is done; a message whose outcome is unknown then gets an error
	// wrapping ErrUnknownOutcome.
	Publish(ctx context.Context, msgs []*Message) []Result
	// Close releases the sink's connections.
	Close(ctx context.Context) error
}

// Sender is implemented by sinks that can send a batch now and learn its
// outcome later. Send writes msgs to the broker, in order, before it
// returns; the wait it returns blocks until every message has an outcome,
// under Publish's contract (one Result per message, in order; a message
// still unanswered when ctx is done gets ErrUnknownOutcome). ctx must stay
// live until wait returns, and wait is called once.
//
// The engine sends a type's next batch while the acknowledgements of the
// last are still in flight: batches leave in the order they were taken and
// their round trips overlap. A sink without Send has its batches published
// one at a time.
type Sender interface {
	Send(ctx context.Context, msgs []*Message) (wait func() []Result)
}

// HealthChecker is implemented by sinks that can say whether their broker is
// reachable, and by inbox sources that can say whether they consume;
// /readyz and the switchyard_sink_up and switchyard_inbox_up gauges use
// it, giving each check a second (a broker gone silent answers nothing).
type HealthChecker interface {
	Healthy(ctx context.Context) error
}

// Fitter is implemented by sinks that can tell, before an event is stored,
// that a message could never be accepted (its size against the broker's
// limits): ingest refuses such a poison event with 413 instead of
// acknowledging it and retrying it for ever.
type Fitter interface {
	Fits(m *Message) error
}

// ReadyNotifier is implemented by sinks that say when their broker becomes
// reachable: the first connection of a router that started without it, or
// a reconnect. The engine then polls every loop at once, instead of at the
// end of the delay an outage grew (up to polling.max).
type ReadyNotifier interface {
	OnReady(func())
}

// Acked is a message a broker acknowledged: the id it was published under
// and where the broker said it put it (Result.Position).
type Acked struct {
	MsgID    string
	Position Position
}

// Stored is a message a broker holds: the topic or subject it went to, the
// id it was published under, where it is, when the broker stored it, and
// the CloudEvents id and source it carries.
type Stored struct {
	Topic    string
	MsgID    string
	Position Position
	Time     time.Time
	EventID  string
	Source   string
}

// Keeper is implemented by sinks that can say what their broker holds.
// After an unclean stop (engine.Republish):
//   - the engine republishes only what the broker lost of what the router
//     recorded as delivered: a broker that acknowledges before it fsyncs
//     (the embedded JetStream) can lose its newest messages in a power cut,
//     while a republish of one it kept would be stored twice once the
//     broker's dedup window has passed — and the machine may have been off
//     for longer than that;
//   - and it marks delivered, without sending them again, the outputs of
//     pending events that the broker stored although the router never
//     recorded it: the crash fell between acknowledgement and commit.
//
// Kept answers for each of msgs, in order, whether the broker still holds
// it (a message it cannot place counts as lost: republished, a duplicate at
// worst, never a loss), and lists the other messages it stored within
// window before its newest one.
type Keeper interface {
	Kept(ctx context.Context, msgs []Acked, window time.Duration) (kept []bool, others []Stored, err error)
}

// ErrUnknownOutcome marks a publish whose fate the router cannot know (the
// deadline fired before the broker answered). The batch is released without
// counting an attempt: fail closed, retry with the same id.
var ErrUnknownOutcome = errors.New("publish outcome unknown")

// ErrSinkUnavailable marks a message a sink did not send because its broker
// is unreachable (not connected). Like ErrUnknownOutcome it counts no
// attempt: a broker outage must not push events toward the DLQ. The loop
// backs off on its poll delay until the broker is back.
var ErrSinkUnavailable = errors.New("sink unavailable, not sent")

// permanentError marks an error that retrying cannot fix.
type permanentError struct{ err error }

func (e *permanentError) Error() string { return e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

// Permanent wraps err so the engine sends the event to the DLQ at once.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &permanentError{err: err}
}

// Permanentf is Permanent(fmt.Errorf(...)).
func Permanentf(format string, args ...any) error { return Permanent(fmt.Errorf(format, args...)) }

// IsPermanent reports whether err (or anything it wraps) was marked permanent.
func IsPermanent(err error) bool {
	var p *permanentError
	return errors.As(err, &p)
}
