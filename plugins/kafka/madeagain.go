package kafka

import (
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// madeAgain keeps, for the poll loop alone, the topics readd re-added and
// which of their partitions have since brought records: a commit of the
// old topic's last batch that comes after the topic was made again lands
// on the new topic (a broker before Kafka 4.2 commits offsets by the
// topic's name), and the inbox would start the new topic there, never
// reading what came before (a Kafka trial: the first 5 of 10 records).
// fromStart sets such a partition back to its start.
type madeAgain struct {
	since   map[string]time.Time // topic -> when readd re-added it
	oldID   map[string][16]byte  // topic -> the id it had (zero: unknown)
	started map[topicPartition]bool
}

type topicPartition struct {
	topic     string
	partition int32
}

// madeAgainFor is how long after a re-add a partition's first records are
// looked at: a late commit is in place before the new topic is assigned,
// and a new topic's partition with records brings them at its first
// fetch (one without any starts at its start anyway: the late offset is
// past its end).
const madeAgainFor = time.Minute

// add notes topic, whose id was oldID, as made again at now.
func (m *madeAgain) add(topic string, oldID [16]byte, now time.Time) {
	if m.since == nil {
		m.since, m.oldID, m.started = map[string]time.Time{}, map[string][16]byte{}, map[topicPartition]bool{}
	}
	m.forget(topic)
	m.since[topic], m.oldID[topic] = now, oldID
}

// forget drops topic and what its partitions brought.
func (m *madeAgain) forget(topic string) {
	delete(m.since, topic)
	delete(m.oldID, topic)
	for tp := range m.started {
		if tp.topic == topic {
			delete(m.started, tp)
		}
	}
}

// fromStart looks at the first records each partition of a topic made
// again brings: when they come from past the partition's start
// (LogStartOffset), it sets the partition back to its start and returns
// it, for the poll loop to leave its records untaken (read again from the
// start, the inbox drops what it has). Once per partition: a compacted
// topic's first record may lie past its start for good. Records of the
// old topic (its id, fetched before the re-add) are the old topic's to
// take: dropped, they were never read again (a review).
func (m *madeAgain) fromStart(cl *kgo.Client, fetches kgo.Fetches, now time.Time) map[topicPartition]bool {
	if len(m.since) == 0 {
		return nil
	}
	reset := map[string]map[int32]kgo.EpochOffset{}
	fetches.EachTopic(func(t kgo.FetchTopic) {
		if _, ok := m.since[t.Topic]; !ok || t.TopicID != [16]byte{} && t.TopicID == m.oldID[t.Topic] {
			return
		}
		for _, p := range t.Partitions {
			if at, ok := m.setBack(t.Topic, &p); ok {
				if reset[t.Topic] == nil {
					reset[t.Topic] = map[int32]kgo.EpochOffset{}
				}
				reset[t.Topic][p.Partition] = kgo.EpochOffset{Epoch: -1, Offset: at}
			}
		}
	})
	var back map[topicPartition]bool
	if len(reset) > 0 {
		cl.SetOffsets(reset)
		back = map[topicPartition]bool{}
		for topic, ps := range reset {
			for p := range ps {
				back[topicPartition{topic, p}] = true
			}
		}
	}
	for topic, at := range m.since {
		if now.Sub(at) > madeAgainFor {
			m.forget(topic)
		}
	}
	return back
}

// setBack says where partition p of a topic made again is set back to,
// the first time it brings records: its start, when they come from past
// it; ok is false when they do not, or its start is unknown (-1).
func (m *madeAgain) setBack(topic string, p *kgo.FetchPartition) (at int64, ok bool) {
	tp := topicPartition{topic, p.Partition}
	if len(p.Records) == 0 || m.started[tp] {
		return 0, false
	}
	m.started[tp] = true
	if p.LogStartOffset < 0 || p.Records[0].Offset <= p.LogStartOffset {
		return 0, false
	}
	return p.LogStartOffset, true
}

// without is recs less those of the partitions in drop.
func without(recs []*kgo.Record, drop map[topicPartition]bool) []*kgo.Record {
	if len(drop) == 0 {
		return recs
	}
	kept := recs[:0:0]
	for _, r := range recs {
		if !drop[topicPartition{r.Topic, r.Partition}] {
			kept = append(kept, r)
		}
	}
	return kept
}
