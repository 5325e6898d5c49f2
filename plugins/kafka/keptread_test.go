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
	"github.com/twmb/franz-go/pkg/kversion"

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

// readAll runs a source of group on c, keeping in book, until it has
// received want records and half a second more, and stops it; it returns
// the ids received.
func readAll(t *testing.T, c *kfake.Cluster, group string, book *keptBook, log hclog.Logger, want int) []string {
	t.Helper()
	s := newSourceKept(t, c, inboxConfig(group), log, book.kept)
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

	produce(t, c, "a", 25, 1, 1)
	if got := readAll(t, c, "g-lost", book, log, 25); len(got) != 25 {
		t.Fatalf("first read: %d records, want 25", len(got))
	}
	deleteGroup(t, c, "g-lost")
	produce(t, c, "b", 10, 1, 1)
	if got := readAll(t, c, "g-lost", book, log, 10); len(got) != 10 || got[0] != "b-0000" {
		t.Fatalf("after the group's offsets were deleted: %d records (first %v), want the 10 new ones:\n%s", len(got), got[:min(len(got), 3)], logs.String())
	}
	if l := logs.String(); !strings.Contains(l, "reading on after the last message the inbox took") || !strings.Contains(l, "partitions=payments/0@25") {
		t.Fatalf("reading on is not told:\n%s", l)
	}

	deleteTopic(t, c, srcTopic)
	createTopic(t, c, srcTopic, 1)
	deleteGroup(t, c, "g-lost")
	produce(t, c, "c", 40, 1, 1) // past the 35 kept of the old topic: read on there, 35 would be skipped
	if got := readAll(t, c, "g-lost", book, log, 40); len(got) != 40 || got[0] != "c-0000" {
		t.Fatalf("the topic made again: %d records (first %v), want its 40 from its start:\n%s", len(got), got[:min(len(got), 3)], logs.String())
	}
	if l := logs.String(); !strings.Contains(l, "in a topic of another id") {
		t.Fatalf("reading a topic made again from its start is not told:\n%s", l)
	}
}

// A kept offset the partition no longer has is read from where the
// partition starts now (ConsumeResetOffset): past its end (a log cut
// back) from its first record, before its start (records deleted) from
// the first left. (A review's test.)
func TestSourceReadsOnFromAKeptOffsetOutOfRange(t *testing.T) {
	for _, tc := range []struct {
		name      string
		kept      int64
		deleteTo  int64
		wantFirst string
		want      int
	}{
		{"past the end", 100, -1, "a-0000", 25},
		{"before the start", 5, 10, "a-0010", 15},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := sourceCluster(t, 1)
			book := &keptBook{reads: map[string]switchyard.Read{}}
			produce(t, c, "a", 25, 1, 1)
			readAll(t, c, "g-range", book, testLogger(), 25)
			deleteGroup(t, c, "g-range")
			r := book.reads["payments/0"]
			r.Next = tc.kept
			book.reads["payments/0"] = r
			if tc.deleteTo >= 0 {
				req := kmsg.NewPtrDeleteRecordsRequest()
				rt := kmsg.NewDeleteRecordsRequestTopic()
				rt.Topic = srcTopic
				p := kmsg.NewDeleteRecordsRequestTopicPartition()
				p.Partition, p.Offset = 0, tc.deleteTo
				rt.Partitions = append(rt.Partitions, p)
				req.Topics, req.TimeoutMillis = append(req.Topics, rt), 5000
				adminRequest(t, c, req, func(r kmsg.Response) int16 { return r.(*kmsg.DeleteRecordsResponse).Topics[0].Partitions[0].ErrorCode })
			}
			if got := readAll(t, c, "g-range", book, testLogger(), tc.want); len(got) != tc.want || got[0] != tc.wantFirst {
				t.Fatalf("got %d (first %v), want %d from %s", len(got), got[:min(3, len(got))], tc.want, tc.wantFirst)
			}
		})
	}
}

// On a cluster whose fetches carry no topic ids (Kafka 2.8–3.0: Fetch
// before v13), the topic's id is asked of its metadata, and a group that
// lost its offsets reads on all the same. (A review found it always read
// from the start.)
func TestSourceReadsOnWithFetchesWithoutTopicIDs(t *testing.T) {
	v := kversion.Stable()
	v.SetMaxKeyVersion(kmsg.Fetch.Int16(), 12)
	c := sourceCluster(t, 1, kfake.MaxVersions(v))
	book := &keptBook{reads: map[string]switchyard.Read{}}
	produce(t, c, "a", 25, 1, 1)
	readAll(t, c, "g-v12", book, testLogger(), 25)
	deleteGroup(t, c, "g-v12")
	produce(t, c, "b", 10, 1, 1)
	if got := readAll(t, c, "g-v12", book, testLogger(), 10); len(got) != 10 {
		t.Fatalf("kept %+v; read %d records after the group lost its offsets (first %v), want the 10 new ones", book.reads["payments/0"], len(got), got[:min(3, len(got))])
	}
}

// The offsets a source read on from are committed (marked) though no
// record comes: a partition left without one would be read from its start
// by another member of the group, which kept nothing of it. (A review's
// test.)
func TestSourceCommitsTheOffsetsItReadOnFrom(t *testing.T) {
	c := sourceCluster(t, 2)
	book := &keptBook{reads: map[string]switchyard.Read{}}
	produce(t, c, "a", 20, 1, 2) // 10 a partition
	readAll(t, c, "g-idle", book, testLogger(), 20)
	deleteGroup(t, c, "g-idle")

	a := newSourceKept(t, c, inboxConfig("g-idle"), testLogger(), book.kept) // the same router, started again
	ra := testkit.RunSource(a, book.receive)
	defer ra.Stop(t)
	var got []int64
	testkit.EventuallyWith(t, 10*time.Second, func() bool {
		got = committed(t, c, "g-idle", 2)
		return got[0] == 10 && got[1] == 10
	}, func() string { return fmt.Sprintf("the group's offsets after reading on: %v, want [10 10]", got) })

	var mu sync.Mutex
	var other []string
	b := newSource(t, c, inboxConfig("g-idle")) // another router of the group, which kept nothing
	rb := testkit.RunSource(b, func(_ context.Context, msgs []switchyard.Inbound) error {
		mu.Lock()
		defer mu.Unlock()
		for _, m := range msgs {
			other = append(other, m.Event.ID)
		}
		return nil
	})
	defer rb.Stop(t)
	time.Sleep(3 * time.Second) // the rebalance that hands it a partition
	mu.Lock()
	defer mu.Unlock()
	if len(other) > 0 {
		t.Fatalf("the other member read %d records taken before: %s", len(other), strings.Join(other, " "))
	}
}

// A rebalance that begins while the source asks where to read on (another
// member joining: franz-go cancels the call's context) makes the source
// return the context's error, not the partitions' start: franz-go would
// assign that, and with cooperative-sticky not fetch the partition it
// keeps again, reading it from its start. (A review's test; the slow
// look-up stands in for a slow Metadata answer.)
func TestSourceReadOnCutShortByARebalanceReadsNothingAgain(t *testing.T) {
	c := sourceCluster(t, 2)
	var logs testkit.Buffer
	log := hclog.New(&hclog.LoggerOptions{Output: &logs, Level: hclog.Info})
	book := &keptBook{reads: map[string]switchyard.Read{}}
	produce(t, c, "a", 20, 1, 2)
	readAll(t, c, "g-race", book, log, 20)
	deleteGroup(t, c, "g-race")
	produce(t, c, "b", 4, 1, 2)

	inKept := make(chan struct{})
	var once sync.Once
	slow := func(topic string, p int32) (switchyard.Read, bool, error) {
		once.Do(func() { close(inKept); time.Sleep(2 * time.Second) })
		return book.kept(topic, p)
	}
	a := newSourceKept(t, c, inboxConfig("g-race"), log, slow)
	var mu sync.Mutex
	var gotA []string
	ra := testkit.RunSource(a, func(_ context.Context, msgs []switchyard.Inbound) error {
		mu.Lock()
		defer mu.Unlock()
		for _, m := range msgs {
			gotA = append(gotA, m.Event.ID)
		}
		return nil
	})
	defer ra.Stop(t)
	<-inKept
	b := newSourceKept(t, c, inboxConfig("g-race"), hclog.NewNullLogger(), book.kept)
	rb := testkit.RunSource(b, func(context.Context, []switchyard.Inbound) error { return nil })
	defer rb.Stop(t)

	time.Sleep(6 * time.Second)
	mu.Lock()
	defer mu.Unlock()
	var again []string
	for _, id := range gotA {
		if strings.HasPrefix(id, "a-") {
			again = append(again, id)
		}
	}
	if len(again) > 0 {
		t.Fatalf("read %d records taken before again (%v)\n%s", len(again), again, logs.String())
	}
}
