package kafka

import (
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// joinWatch is a kgo hook that keeps when the group's JoinGroup request
// now in flight was written: the coordinator answers a join only once
// every member of the group has joined again or run out of time, and a
// member that stopped without leaving (a router SIGKILLed) holds the
// rebalance, and the partitions it had, until its session_timeout. The
// inbox reads only the partitions it kept meanwhile; Healthy says so once
// a join has waited joinSlow (a trial: /readyz said ok for 80 s in which
// three of four partitions went unread after three SIGKILLs, since the
// inbox had a generation, from before).
type joinWatch struct {
	since atomic.Int64 // unix nanoseconds; 0: no join in flight
}

var (
	_ kgo.HookBrokerWrite = (*joinWatch)(nil)
	_ kgo.HookBrokerRead  = (*joinWatch)(nil)
)

// joinSlow is how long a join may wait before Healthy says so: longer
// than a rebalance among members that answer (they join again within a
// poll, a second or two).
const joinSlow = 5 * time.Second

func (j *joinWatch) OnBrokerWrite(_ kgo.BrokerMetadata, key int16, _ int, _, _ time.Duration, err error) {
	if key == int16(kmsg.JoinGroup) && err == nil {
		j.since.CompareAndSwap(0, time.Now().UnixNano())
	}
}

func (j *joinWatch) OnBrokerRead(_ kgo.BrokerMetadata, key int16, _ int, _, _ time.Duration, _ error) {
	if key == int16(kmsg.JoinGroup) {
		j.since.Store(0)
	}
}

// waiting is how long the join in flight has waited, if more than
// joinSlow; 0 otherwise.
func (j *joinWatch) waiting() time.Duration {
	since := j.since.Load()
	if since == 0 {
		return 0
	}
	if d := time.Since(time.Unix(0, since)); d > joinSlow {
		return d
	}
	return 0
}
