package kafka

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/switchyard-router/switchyard"
)

// readOn is kgo.AdjustFetchOffsetsFn. A partition the group has no offset
// for (the cluster's offsets.retention.minutes expired them while no
// member was in the group: an edge node stopped for a week; or someone
// deleted them) would be read from its start (ConsumeResetOffset), and
// every message older than the inbox's ttl handed to the service again.
// One the inbox read before is read on from where it got to instead, when
// the topic is the one it read (the same id: a topic made again gets a
// new one, and its offsets begin again). Both are logged. The offsets read
// on from are committed (commitReadOn): an idle partition would otherwise
// stay without one, and another member of the group, which kept nothing
// of it, would read it from its start.
// docs/decisions/inbox-offsets.md.
func (s *Source) readOn(ctx context.Context, offsets map[string]map[int32]kgo.Offset) (map[string]map[int32]kgo.Offset, error) {
	if s.kept == nil {
		return offsets, nil
	}
	lost := s.keptOfUncommitted(offsets)
	if len(lost) == 0 {
		return offsets, nil
	}
	select {
	case <-s.clSet: // the group starts inside kgo.NewClient: s.cl may not be set yet
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	ids, err := s.topicIDsNow(ctx, topicsOf(lost))
	if ctx.Err() != nil {
		// The session is revoking (another member joined): franz-go
		// would assign what is returned with a nil error, and not fetch
		// the partitions it keeps again (a review: read from the start).
		return nil, ctx.Err()
	}
	if err != nil {
		s.log.Warn("the group has no offset for partitions this inbox read before, and the cluster did not say the topics' ids: reading them from their start; messages the inbox took longer ago than its ttl are handed on again",
			"inbox", s.name, "group", s.group, "partitions", fmtReads(lost), "error", err)
		return offsets, nil
	}
	var on, start []switchyard.Read
	for _, r := range lost {
		if r.ID == ([16]byte{}) || r.ID != ids[r.Topic] {
			start = append(start, r)
			continue
		}
		offsets[r.Topic][r.Partition] = kgo.NewOffset().At(r.Next)
		on = append(on, r)
	}
	if len(on) > 0 {
		s.toCommit(on)
		go s.commitReadOn(ctx) // beside the assignment: a poll of an idle partition never returns
	}
	if len(on) > 0 {
		s.log.Warn("the group has no offset for partitions this inbox read before (expired by the cluster's offsets.retention.minutes while no member was in the group, or deleted): reading on after the last message the inbox took",
			"inbox", s.name, "group", s.group, "partitions", fmtReads(on))
	}
	if len(start) > 0 {
		s.log.Warn("the group has no offset for partitions this inbox read in a topic of another id (made again since), or where the cluster gives no topic ids: reading them from their start; messages the inbox took longer ago than its ttl are handed on again",
			"inbox", s.name, "group", s.group, "partitions", fmtReads(start))
	}
	return offsets, nil
}

// keptOfUncommitted is what the router kept of each partition in offsets
// the group has no offset for (ConsumeResetOffset's start: below 0).
func (s *Source) keptOfUncommitted(offsets map[string]map[int32]kgo.Offset) []switchyard.Read {
	var lost []switchyard.Read
	for topic, ps := range offsets {
		for p, o := range ps {
			if o.EpochOffset().Offset >= 0 {
				continue
			}
			r, ok, err := s.kept(topic, p)
			if err != nil {
				s.log.Warn("cannot read where the inbox got to in a partition the group has no offset for: reading it from its start",
					"inbox", s.name, "partition", fmt.Sprintf("%s/%d", topic, p), "error", err)
				continue
			}
			if ok {
				lost = append(lost, r)
			}
		}
	}
	return lost
}

// topicsOf is the topics of reads, each once.
func topicsOf(reads []switchyard.Read) []string {
	var topics []string
	for _, r := range reads {
		if !slices.Contains(topics, r.Topic) {
			topics = append(topics, r.Topic)
		}
	}
	return topics
}

// topicIDsNow asks the cluster for the ids of topics (zero for a cluster
// that gives none).
func (s *Source) topicIDsNow(ctx context.Context, topics []string) (map[string][16]byte, error) {
	req := kmsg.NewPtrMetadataRequest()
	for _, topic := range topics {
		t := kmsg.NewMetadataRequestTopic()
		t.Topic = kmsg.StringPtr(topic)
		req.Topics = append(req.Topics, t)
	}
	resp, err := req.RequestWith(ctx, s.cl)
	if err != nil {
		return nil, err
	}
	ids := make(map[string][16]byte, len(resp.Topics))
	for _, t := range resp.Topics {
		if t.Topic == nil {
			continue
		}
		if err := kerr.ErrorForCode(t.ErrorCode); err != nil {
			return nil, fmt.Errorf("topic %s: %w", *t.Topic, err)
		}
		ids[*t.Topic] = t.TopicID
	}
	return ids, nil
}

// fmtReads names partitions and offsets as the logs do: topic/partition@offset.
func fmtReads(reads []switchyard.Read) string {
	names := make([]string, len(reads))
	for i, r := range reads {
		names[i] = fmt.Sprintf("%s/%d@%d", r.Topic, r.Partition, r.Next)
	}
	slices.Sort(names)
	return strings.Join(names, " ")
}

// toCommit notes the reads partitions were read on from, for
// commitReadOn.
func (s *Source) toCommit(reads []switchyard.Read) {
	s.readOnMu.Lock()
	defer s.readOnMu.Unlock()
	for _, r := range reads {
		s.readOnAt[topicPartition{r.Topic, r.Partition}] = r.Next
	}
}

// dropReadOn forgets what commitReadOn had to commit of partitions m (the
// group took them back).
func (s *Source) dropReadOn(m map[string][]int32) {
	s.readOnMu.Lock()
	defer s.readOnMu.Unlock()
	for topic, ps := range m {
		for _, p := range ps {
			delete(s.readOnAt, topicPartition{topic, p})
		}
	}
}

// commitReadOn commits, marked, the offsets readOn read on from, as a
// batch's are: readOn starts it beside the assignment, and Run calls it
// after each poll, where one that failed is tried again.
func (s *Source) commitReadOn(ctx context.Context) {
	s.readOnMu.Lock()
	pending := s.readOnAt
	s.readOnAt = map[topicPartition]int64{}
	s.readOnMu.Unlock()
	if len(pending) == 0 {
		return
	}
	at := map[string]map[int32]kgo.EpochOffset{}
	for tp, next := range pending {
		if at[tp.topic] == nil {
			at[tp.topic] = map[int32]kgo.EpochOffset{}
		}
		at[tp.topic][tp.partition] = kgo.EpochOffset{Epoch: -1, Offset: next}
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), commitTimeout)
	defer cancel()
	var failed error
	s.cl.CommitOffsetsSync(markCommits(cctx), at, func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
		failed = err
		for i := 0; resp != nil && i < len(resp.Topics); i++ {
			for _, p := range resp.Topics[i].Partitions {
				failed = cmp.Or(failed, kerr.ErrorForCode(p.ErrorCode))
			}
		}
	})
	if failed == nil {
		return
	}
	s.log.Warn("could not commit the offsets the inbox read on from; trying again at the next poll", "inbox", s.name, "group", s.group, "error", failed)
	s.readOnMu.Lock()
	defer s.readOnMu.Unlock()
	for tp, next := range pending {
		if _, newer := s.readOnAt[tp]; !newer {
			s.readOnAt[tp] = next
		}
	}
}
