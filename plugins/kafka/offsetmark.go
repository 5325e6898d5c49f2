package kafka

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// A source's commits carry a mark in each partition's commit metadata,
// "switchyard:<offset>", so that the offsets the group gives a source when
// it takes partitions tell one a router committed from one someone else
// set: an operator's reset (kafka-consumer-groups.sh --reset-offsets
// writes no metadata), another consumer sharing the group's name, an older
// router. A reset forward while no router read skipped messages
// the inbox never saw, with no other sign (the lag reads 0); a reset back
// brings redeliveries the inbox drops while it remembers them. Either is
// logged when the group hands the partition over, once per offset and
// process.

// offsetMark is the metadata a source commits offset with.
func offsetMark(offset int64) string { return "switchyard:" + strconv.FormatInt(offset, 10) }

// markCommits has the commit made with ctx carry offsetMark for each
// partition (franz-go's PreCommitFnContext).
func markCommits(ctx context.Context) context.Context {
	return kgo.PreCommitFnContext(ctx, func(req *kmsg.OffsetCommitRequest) error {
		for i := range req.Topics {
			for j := range req.Topics[i].Partitions {
				p := &req.Topics[i].Partitions[j]
				mark := offsetMark(p.Offset)
				p.Metadata = &mark
			}
		}
		return nil
	})
}

// offsetsFetched is kgo.OnOffsetsFetched: it logs, in one line, the
// partitions whose committed offset carries no router's mark for that
// offset, each offset once per process: an idle partition keeps its
// unmarked offset until the inbox reads from it and commits, and franz-go
// fetches it again at each handover (a review: one reset, warned at every
// start and every rebalance).
func (s *Source) offsetsFetched(_ context.Context, _ *kgo.Client, resp *kmsg.OffsetFetchResponse) error {
	var unmarked []string
	s.warnedMu.Lock()
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			if p.ErrorCode != 0 || p.Offset < 0 {
				continue // none committed: read from the start (ConsumeResetOffset)
			}
			if p.Metadata != nil && *p.Metadata == offsetMark(p.Offset) {
				continue
			}
			at := fmt.Sprintf("%s/%d@%d", t.Topic, p.Partition, p.Offset)
			if _, told := s.warned[at]; told {
				continue
			}
			s.warned[at] = struct{}{}
			unmarked = append(unmarked, at)
		}
	}
	s.warnedMu.Unlock()
	if len(unmarked) == 0 {
		return nil
	}
	shown := unmarked[:min(len(unmarked), 10)]
	s.log.Warn("the group's offsets of partitions were not committed by a router: set by someone else (an offset reset, another consumer with the group's name) or by an older router that did not mark its commits; reset forward, the messages before them this inbox had not read were skipped; reset back, those it had are read again, and dropped while the inbox remembers them (its ttl)",
		"inbox", s.name, "group", s.group, "partitions", strings.Join(shown, " "), "count", len(unmarked))
	return nil
}
