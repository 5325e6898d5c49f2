package storage

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/rand"
	"path/filepath"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/switchyard-router/switchyard"
)

// refDue is Due as it was before linesBehind (b4f1104): it reads the
// record of every due entry. Kept as the reference the faster Due must
// agree with.
func (tx *Tx) refDue(t string, now time.Time, ahead time.Duration, limit Limit, orderByKey bool, skip func(key []byte) bool) ([]*Record, error) {
	q, _ := tx.sub(bucketQueue, t)
	if q == nil {
		return nil, nil
	}
	var keys *bolt.Bucket
	if orderByKey {
		keys, _ = tx.sub(bucketKeys, t)
	}
	end, far := uint64(now.UnixNano()), uint64(now.Add(ahead).UnixNano())
	var out []*Record
	var held int64
	c := q.Cursor()
	for k, v := c.First(); k != nil && len(out) < limit.Events && (limit.Bytes == 0 || held < limit.Bytes); k, v = c.Next() {
		due := binary.BigEndian.Uint64(k)
		if due > far {
			break
		}
		if skip != nil && skip(v) {
			continue
		}
		r, err := tx.recordAt(v)
		if err != nil {
			return nil, err
		}
		if due > end && r.Attempts > 0 {
			continue
		}
		if keys != nil && !firstOfLine(keys, r) {
			continue
		}
		out = append(out, r)
		held += int64(r.Event.Bytes())
	}
	return out, nil
}

// keysOf is the keys of rs, in order.
func keysOf(rs []*Record) []string {
	var s []string
	for _, r := range rs {
		s = append(s, r.Key())
	}
	return s
}

// Due takes what the Due that read every record took, in the same order,
// whatever was done to the queue: random inserts (keys, tenants, none),
// reschedules with attempts, deliveries, dead letters, retries,
// redeliveries, ordering by key on and off (events left out of their
// lines), random skips, limits (of events, and of bytes) and aheads; lines read in steps of 256 and
// of 2 (a review of session 43's linesBehind wrote it).
func TestDueMatchesTheRecordReadingDue(t *testing.T) {
	seeds := int64(24)
	if testing.Short() {
		seeds = 6
	}
	defer func(step int) { linesBehindStep = step }(linesBehindStep)
	for seed := int64(0); seed < seeds; seed++ {
		linesBehindStep = []int{256, 2}[seed%2]
		rng := rand.New(rand.NewSource(seed))
		db, err := Open(filepath.Join(t.TempDir(), "r.db"), Options{})
		if err != nil {
			t.Fatal(err)
		}
		t0 := time.Unix(100000, 0)
		var ids []string
		for step := 0; step < 300; step++ {
			obk := rng.Intn(10) != 0
			err := db.Update(context.Background(), func(tx *Tx) error {
				switch op := rng.Intn(10); {
				case op < 4:
					r := diskEvent(t0.Add(time.Duration(rng.Intn(100)) * time.Second))
					r.Event.ID = fmt.Sprint("e", step)
					if k := rng.Intn(5); k > 0 {
						r.Event.Extensions = []switchyard.Header{{Name: "partitionkey", Value: fmt.Sprint("k", k)}}
					}
					if rng.Intn(3) == 0 {
						r.Tenant = "acme"
					}
					if err := tx.InsertEvent(r, obk); err != nil {
						return err
					}
					ids = append(ids, r.Key())
				case len(ids) == 0:
				default:
					r, err := tx.Record(ids[rng.Intn(len(ids))])
					if err != nil {
						return err
					}
					now := t0.Add(time.Duration(rng.Intn(200)) * time.Second)
					switch {
					case r.State == StatePending && op < 6:
						r.Attempts++
						return tx.Reschedule(r, now)
					case r.State == StatePending && op < 8:
						return tx.MarkDelivered(r, now, time.Hour)
					case r.State == StatePending:
						return tx.MoveToDLQ(r, now, "x")
					case r.State == StateDLQ:
						return tx.RetryDeadLetter(r, now, obk)
					case r.State == StateDelivered:
						r.Outputs = []Output{{Delivered: true}}
						_, err := tx.Redeliver(r, func(Output) bool { return true }, obk, now)
						return err
					}
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			db.View(func(tx *Tx) error {
				now := t0.Add(time.Duration(rng.Intn(200)) * time.Second)
				ahead := time.Duration(rng.Intn(3)) * 30 * time.Second
				limit := Limit{Events: 1 + rng.Intn(20)}
				if rng.Intn(3) == 0 {
					limit.Bytes = int64(1 + rng.Intn(2000)) // a few events' worth
				}
				skipSet := map[string]bool{}
				for _, id := range ids {
					if rng.Intn(8) == 0 {
						skipSet[id] = true
					}
				}
				skip := func(k []byte) bool { return skipSet[string(k)] }
				for _, obk := range []bool{true, false} {
					got, err1 := tx.Due("orders.created", now, ahead, limit, obk, skip)
					want, err2 := tx.refDue("orders.created", now, ahead, limit, obk, skip)
					if err1 != nil || err2 != nil {
						t.Fatal(err1, err2)
					}
					if fmt.Sprint(keysOf(got)) != fmt.Sprint(keysOf(want)) {
						t.Fatalf("seed %d step %d: Due %v, reference %v", seed, step, keysOf(got), keysOf(want))
					}
				}
				return nil
			})
		}
		db.Close(context.Background())
	}
}

// BenchmarkHotKeyWaitingAmongOthers is one poll of 100 when a hot key X's
// first event waits out a backoff, its 100,000 events behind interleaved
// with 100,000 of other keys: linesBehind read all of X's line, 18 times
// what reading the records cost; now a step of it (a review).
func BenchmarkHotKeyWaitingAmongOthers(b *testing.B) {
	db := keyedEvents(b, 200_000, func(i int) string {
		if i%2 == 0 {
			return "X"
		}
		return fmt.Sprint("k", i)
	})
	// X's first: a failed attempt, due in an hour.
	if err := db.Update(context.Background(), func(tx *Tx) error {
		recs, err := tx.Due("orders.created", time.Now(), 0, Limit{Events: 1}, true, nil)
		if err != nil {
			return err
		}
		r := recs[0]
		r.Attempts++
		return tx.Reschedule(r, time.Now().Add(time.Hour))
	}); err != nil {
		b.Fatal(err)
	}
	for _, ref := range []bool{false, true} {
		b.Run(fmt.Sprint("reference=", ref), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				db.View(func(tx *Tx) error {
					due := tx.Due
					if ref {
						due = tx.refDue
					}
					recs, err := due("orders.created", time.Now(), 0, Limit{Events: 100}, true, nil)
					if err != nil || len(recs) != 100 {
						b.Fatalf("%d %v", len(recs), err)
					}
					return nil
				})
			}
		})
	}
}
