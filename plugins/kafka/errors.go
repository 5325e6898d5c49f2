package kafka

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"

	"github.com/switchyard-router/switchyard"
	"github.com/twmb/franz-go/pkg/kerr"
	kgo "github.com/twmb/franz-go/pkg/kgo"
)

// permanentErrs are the broker answers that retrying the same record cannot
// change: the engine sends the event to the DLQ at once. franz-go fails a
// record that cannot fit in a batch of ProducerBatchMaxBytes itself, before
// sending, with kerr.MessageTooLarge (there is no separate kgo error).
var permanentErrs = []error{
	kerr.MessageTooLarge,
	kerr.RecordListTooLarge,
	kerr.TopicAuthorizationFailed,
	kerr.InvalidTopicException,
	kerr.InvalidRecord,
}

// authErrs are the broker refusing the client's SASL credentials. However
// long it lasts, that is an outage of the sink, not the record's fault: a
// broker restarted with its credential store not yet loaded refuses them
// for seconds, and a wrong password keeps refusing until the operator
// fixes it, as at a start (connState names it in /readyz and the log).
// The event waits and counts no attempt; it is never dead-lettered for it
// (docs/decisions/outage-no-attempt.md).
var authErrs = []error{
	kerr.SaslAuthenticationFailed,
	kerr.UnsupportedSaslMechanism,
	kerr.IllegalSaslState,
}

// unknownOutcomeErrs end a record without a broker answer: it may or may not
// be in the log. The engine releases the event without counting an attempt
// and retries it with the same id (contract §1, fail closed).
var unknownOutcomeErrs = []error{
	context.DeadlineExceeded,
	context.Canceled,
	kgo.ErrRecordTimeout,
	kgo.ErrClientClosed,
	kgo.ErrAborting,
}

// classify turns a franz-go produce error for one record into the error the
// engine expects.
func (s *Sink) classify(topic string, err error) error {
	if err == nil {
		return nil
	}
	for _, a := range authErrs {
		if errors.Is(err, a) {
			return fmt.Errorf("%s: topic %q: the broker refused the client's credentials: %w: %w", s.name, topic, err, switchyard.ErrSinkUnavailable)
		}
	}
	for _, p := range permanentErrs {
		if errors.Is(err, p) {
			return switchyard.Permanent(fmt.Errorf("%s: topic %q: %w", s.name, topic, err))
		}
	}
	if errors.Is(err, kerr.UnknownTopicID) {
		// The topic was deleted, and maybe made again under a new id:
		// franz-go keeps producing to the id it knows until the topic is
		// purged and added again, which the next produce does. Before,
		// every event of a topic made again failed until a restart (a
		// broker trial).
		// One purge at a time per topic: every record of the batch fails
		// so, and a late purge would fail the next batch's records.
		if _, busy := s.purging.LoadOrStore(topic, true); !busy {
			go func() {
				defer s.purging.Delete(topic)
				s.cl.PurgeTopicsFromProducing(topic)
			}()
		}
	}
	if errors.Is(err, kerr.UnknownTopicOrPartition) || errors.Is(err, kerr.UnknownTopicID) {
		s.topics.forget(topic)
		return fmt.Errorf("%s: topic %q does not exist: %w", s.name, topic, err)
	}
	if unknownOutcome(err) {
		return s.withConnError(fmt.Errorf("%s: topic %q: %w (%w)", s.name, topic, switchyard.ErrUnknownOutcome, err))
	}
	return fmt.Errorf("%s: topic %q: %w", s.name, topic, err)
}

// unknownOutcome says whether err ended a record without a broker's
// answer: one of unknownOutcomeErrs, or a network error: franz-go fails a
// record with the last one once its retries run out ("unable to dial" when
// the broker is gone, a reset when the connection broke after the request
// was written), and a record the broker may have is retried with its id,
// not counted as an attempt. Before, a broker killed for four minutes
// dead-lettered a third of the events sent meanwhile (a broker trial).
func unknownOutcome(err error) bool {
	for _, u := range unknownOutcomeErrs {
		if errors.Is(err, u) {
			return true
		}
	}
	var netErr net.Error
	return errors.As(err, &netErr) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
}
