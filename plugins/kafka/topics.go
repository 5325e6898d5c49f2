package kafka

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// missingTTL is how long a topic the broker said is missing (or refused) is
// answered from memory before we ask again. Short: an operator who creates
// the topic sees the router pick it up within a second.
const missingTTL = time.Second

// topicCache remembers which topics the broker confirmed. On its own,
// franz-go buffers a record for an unknown topic and fails it only after
// UnknownTopicRetries (4) metadata refreshes, each one a round of retry
// backoff (about a second against kfake, more against a loaded cluster),
// and every Publish to that topic would pay it again. So Publish asks once
// per new topic with a plain Metadata request, fails the records of a
// missing topic at once with "topic X does not exist", and answers from
// memory for missingTTL. CheckTopics uses the same request.
type topicCache struct {
	mu      sync.Mutex
	ok      map[string]bool
	refused map[string]refusal
}

type refusal struct {
	err error
	at  time.Time
}

func newTopicCache() *topicCache {
	return &topicCache{ok: map[string]bool{}, refused: map[string]refusal{}}
}

// lookup says whether topic is known good, known bad (err != nil), or
// unknown (known == false).
func (c *topicCache) lookup(topic string, now time.Time) (known bool, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ok[topic] {
		return true, nil
	}
	if r, found := c.refused[topic]; found && now.Sub(r.at) < missingTTL {
		return true, r.err
	}
	return false, nil
}

func (c *topicCache) store(topic string, err error, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err == nil {
		c.ok[topic] = true
		delete(c.refused, topic)
		return
	}
	delete(c.ok, topic)
	c.refused[topic] = refusal{err: err, at: now}
}

// forget drops what we know about topic (it was deleted under us).
func (c *topicCache) forget(topic string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.ok, topic)
	delete(c.refused, topic)
}

// describeTopics asks the cluster about topics with one Metadata request.
// The map holds every requested topic: nil if it exists, else the broker's
// topic-level error (kerr.UnknownTopicOrPartition for a missing topic). The
// request never creates a topic.
func (s *Sink) describeTopics(ctx context.Context, topics []string) (map[string]error, error) {
	req := kmsg.NewPtrMetadataRequest()
	req.AllowAutoTopicCreation = false
	for _, t := range topics {
		rt := kmsg.NewMetadataRequestTopic()
		rt.Topic = kmsg.StringPtr(t)
		req.Topics = append(req.Topics, rt)
	}
	resp, err := req.RequestWith(ctx, s.client())
	if err != nil {
		return nil, err
	}
	out := make(map[string]error, len(topics))
	for _, t := range topics {
		out[t] = kerr.UnknownTopicOrPartition // absent from the answer = missing
	}
	for _, rt := range resp.Topics {
		if rt.Topic == nil {
			continue
		}
		name := *rt.Topic
		if _, asked := out[name]; !asked {
			continue
		}
		switch err := kerr.ErrorForCode(rt.ErrorCode); {
		case err == nil:
			out[name] = nil
		case err == kerr.UnknownTopicOrPartition || err == kerr.UnknownTopicID ||
			err == kerr.TopicAuthorizationFailed || err == kerr.InvalidTopicException:
			out[name] = err
		default:
			// LeaderNotAvailable and friends: the topic exists, it
			// is just moving. franz-go waits that out itself.
			out[name] = nil
		}
	}
	now := time.Now()
	for t, err := range out {
		s.topics.store(t, err, now)
	}
	return out, nil
}

// CheckTopics reports the topics that do not exist on the cluster (or that
// this client may not use). The router calls it at startup to warn, and
// `router validate -check-sinks` to fail. It returns nil when every topic
// exists, and an error naming each bad topic otherwise; an error reaching
// the cluster is returned as is.
func (s *Sink) CheckTopics(ctx context.Context, topics []string) error {
	topics = slices.Compact(slices.Sorted(slices.Values(topics)))
	if len(topics) == 0 {
		return nil
	}
	res, err := s.describeTopics(ctx, topics)
	if err != nil {
		return fmt.Errorf("%s: cannot read topic metadata: %w", s.name, err)
	}
	var bad []string
	var first error
	for _, t := range topics {
		switch err := res[t]; {
		case err == nil:
			continue
		case err == kerr.UnknownTopicOrPartition || err == kerr.UnknownTopicID:
			bad = append(bad, fmt.Sprintf("topic %q does not exist", t))
		default:
			bad = append(bad, fmt.Sprintf("topic %q: %v", t, err))
		}
		if first == nil {
			first = res[t]
		}
	}
	if len(bad) == 0 {
		return nil
	}
	return &topicsError{msg: s.name + ": " + strings.Join(bad, "; "), err: first}
}

// topicsError lists every bad topic and wraps the first broker error, so
// errors.Is(err, kerr.UnknownTopicOrPartition) works.
type topicsError struct {
	msg string
	err error
}

func (e *topicsError) Error() string { return e.msg }
func (e *topicsError) Unwrap() error { return e.err }
