package kafka

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/switchyard-router/switchyard"
	"github.com/switchyard-router/switchyard/internal/testkit"
)

// keptBook keeps, as the engine's Receive does with each batch it takes,
// the offset after the last message of each partition and its topic's id.
type keptBook struct {
	mu    sync.Mutex
	reads map[string]switchyard.Read
	ids   []string // every id received
}

func (k *keptBook) receive(_ context.Context, msgs []switchyard.Inbound) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, m := range msgs {
		r := m.Read
		k.reads[fmt.Sprintf("%s/%d", r.Topic, r.Partition)] = r
		k.ids = append(k.ids, m.Event.ID)
	}
	return nil
}

func (k *keptBook) kept(topic string, partition int32) (switchyard.Read, bool, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	r, ok := k.reads[fmt.Sprintf("%s/%d", topic, partition)]
	return r, ok, nil
}

// received is every id received since the last call.
func (k *keptBook) received() []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	ids := k.ids
	k.ids = nil
	return ids
}

// deleteGroup deletes group (its committed offsets with it), as an
// operator would, or as Kafka's offset retention does to a group without
// members.
func deleteGroup(t *testing.T, c *kfake.Cluster, group string) {
	t.Helper()
	req := kmsg.NewPtrDeleteGroupsRequest()
	req.Groups = []string{group}
	adminRequest(t, c, req, func(r kmsg.Response) int16 { return r.(*kmsg.DeleteGroupsResponse).Groups[0].ErrorCode })
}

// A partition whose group has no offset any more (deleted, or expired by
// the cluster's offsets.retention.minutes while the router was stopped) is
// read on after the last message the inbox took, as the router kept it,
// not from its start, where every message older than the inbox's ttl
// would be handed to the service again; a topic made again under the same
// name (another id: its offsets begin again) is read from its start, so
// that none of its messages is skipped. Both are logged.
func TestSourceReadsOnWhereTheGroupLostItsOffsets(t *testing.T) {
	c := sourceCluster(t, 1)
	var logs testkit.Buffer
	log := hclog.New(&hclog.LoggerOptions{Output: &logs, Level: hclog.Info})
	book := &keptBook{reads: map[string]switchyard.Read{}}
	readAll := func(want int) []string {
		t.Helper()
		s := newSourceLogged(t, c, inboxConfig("g-lost"), log)
		s.kept = book.kept
		r := testkit.RunSource(s, book.receive)
		var got []string
		testkit.Eventually(t, "the records", 10*time.Second, func() bool {
			got = append(got, book.received()...)
			return len(got) >= want
		})
		time.Sleep(500 * time.Millisecond) // anything more that would come
		got = append(got, book.received()...)
		r.Stop(t)
		if err := s.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		return got
	}

	produce(t, c, "a", 25, 1, 1)
	if got := readAll(25); len(got) != 25 {
		t.Fatalf("first read: %d records, want 25", len(got))
	}
	deleteGroup(t, c, "g-lost")
	produce(t, c, "b", 10, 1, 1)
	if got := readAll(10); len(got) != 10 || got[0] != "b-0000" {
		t.Fatalf("after the group's offsets were deleted: %d records (first %v), want the 10 new ones:\n%s", len(got), got[:min(len(got), 3)], logs.String())
	}
	if l := logs.String(); !strings.Contains(l, "reading on after the last message the inbox took") || !strings.Contains(l, "partitions=payments/0@25") {
		t.Fatalf("reading on is not told:\n%s", l)
	}

	deleteTopic(t, c, srcTopic)
	createTopic(t, c, srcTopic, 1)
	deleteGroup(t, c, "g-lost")
	produce(t, c, "c", 40, 1, 1) // past the 35 kept of the old topic: read on there, 35 would be skipped
	if got := readAll(40); len(got) != 40 || got[0] != "c-0000" {
		t.Fatalf("the topic made again: %d records (first %v), want its 40 from its start:\n%s", len(got), got[:min(len(got), 3)], logs.String())
	}
	if l := logs.String(); !strings.Contains(l, "in a topic of another id") {
		t.Fatalf("reading a topic made again from its start is not told:\n%s", l)
	}
}
