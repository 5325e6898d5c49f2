package kafka

import (
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
// new one, and its offsets begin again). Both are logged.
// docs/decisions/inbox-offsets.md.
func (s *Source) readOn(ctx context.Context, offsets map[string]map[int32]kgo.Offset) (map[string]map[int32]kgo.Offset, error) {
	if s.kept == nil {
		return offsets, nil
	}
	lost := s.keptOfUncommitted(offsets)
	if len(lost) == 0 {
		return offsets, nil
	}
	ids, err := s.topicIDsNow(ctx, lost)
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

// topicIDsNow asks the cluster for the ids of reads' topics (zero for a
// cluster that gives none).
func (s *Source) topicIDsNow(ctx context.Context, reads []switchyard.Read) (map[string][16]byte, error) {
	req := kmsg.NewPtrMetadataRequest()
	for _, r := range reads {
		if !slices.ContainsFunc(req.Topics, func(t kmsg.MetadataRequestTopic) bool { return *t.Topic == r.Topic }) {
			t := kmsg.NewMetadataRequestTopic()
			t.Topic = kmsg.StringPtr(r.Topic)
			req.Topics = append(req.Topics, t)
		}
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
