package kafka

import (
	"sync"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/switchyard-router/switchyard"
)

// lagBook keeps, per partition the inbox reads, how many records its
// broker holds past those the inbox has taken: the partition's high
// watermark at its last fetch less the offset after the last record it
// brought, plus those of a batch the inbox refused (Source.Lag). A
// transactional topic's commit markers take an offset each and are no
// records: a partition read to its end reads 1 while its last offset is
// a marker.
type lagBook struct {
	mu sync.Mutex
	by map[topicPartition]int64
}

var _ switchyard.Lagger = (*Source)(nil)

// note takes the partitions of a poll that brought records, once the
// inbox took them or refused them (then they count: they are read again
// from the first; a review found a refused batch left out).
func (l *lagBook) note(fetches kgo.Fetches, refused bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	fetches.EachPartition(func(p kgo.FetchTopicPartition) {
		if p.Err != nil || len(p.Records) == 0 {
			return
		}
		if l.by == nil {
			l.by = map[topicPartition]int64{}
		}
		n := max(0, p.HighWatermark-(p.Records[len(p.Records)-1].Offset+1))
		if refused {
			n += int64(len(p.Records))
		}
		l.by[topicPartition{p.Topic, p.Partition}] = n
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
