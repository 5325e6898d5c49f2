package kafka

import (
	"sync"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/switchyard-router/switchyard"
)

// lagBook keeps, per partition the inbox reads, how many records its
// broker holds past those the inbox has read: the partition's high
// watermark at its last fetch less the offset after the last record it
// brought (Source.Lag).
type lagBook struct {
	mu sync.Mutex
	by map[topicPartition]int64
}

var _ switchyard.Lagger = (*Source)(nil)

// note takes the partitions of a poll that brought records.
func (l *lagBook) note(fetches kgo.Fetches) {
	fetches.EachPartition(func(p kgo.FetchTopicPartition) {
		if p.Err != nil || len(p.Records) == 0 {
			return
		}
		l.mu.Lock()
		if l.by == nil {
			l.by = map[topicPartition]int64{}
		}
		l.by[topicPartition{p.Topic, p.Partition}] = max(0, p.HighWatermark-(p.Records[len(p.Records)-1].Offset+1))
		l.mu.Unlock()
	})
}

// drop forgets partitions the inbox no longer reads (revoked, lost).
func (l *lagBook) drop(m map[string][]int32) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for topic, ps := range m {
		for _, p := range ps {
			delete(l.by, topicPartition{topic, p})
		}
	}
}

// Lag is the records the inbox's partitions held past what it had read,
// as their last fetches saw them.
func (s *Source) Lag() (int64, bool) {
	s.lag.mu.Lock()
	defer s.lag.mu.Unlock()
	var n int64
	for _, v := range s.lag.by {
		n += v
	}
	return n, s.lag.by != nil
}
