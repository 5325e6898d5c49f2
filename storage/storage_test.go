package storage_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/switchyard-router/switchyard"
	"github.com/switchyard-router/switchyard/storage"
	"github.com/switchyard-router/switchyard/storage/storagetest"
)

var ctx = context.Background()

func record(id, typ string, created time.Time, pk string) *storage.Record {
	r := &storage.Record{
		Event:     switchyard.Event{ID: id, Type: typ, Source: "/t", SpecVersion: "1.0"},
		CreatedAt: created,
	}
	if pk != "" {
		r.Event.Extensions = []switchyard.Header{{Name: "partitionkey", Value: pk}}
	}
	return r
}

func insert(t *testing.T, db *storage.DB, recs ...*storage.Record) {
	t.Helper()
	err := db.Update(ctx, func(tx *storage.Tx) error {
		for _, r := range recs {
			if err := tx.InsertEvent(r, true); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// removed runs a cleanup (DeleteExpiredDelivered and the like) in its own
// transaction and returns how many it removed; an error fails the test.
func removed(t *testing.T, db *storage.DB, clean func(*storage.Tx) (int, error)) int {
	t.Helper()
	var n int
	if err := db.Update(ctx, func(tx *storage.Tx) (err error) { n, err = clean(tx); return }); err != nil {
		t.Fatal(err)
	}
	return n
}

// onRecord runs fn on the record stored under key, in a transaction.
func onRecord(t *testing.T, db *storage.DB, key string, fn func(*storage.Tx, *storage.Record) error) {
	t.Helper()
	if err := db.Update(ctx, func(tx *storage.Tx) error {
		r, err := tx.Record(key)
		if err != nil {
			return err
		}
		return fn(tx, r)
	}); err != nil {
		t.Fatal(err)
	}
}

// reschedule moves the pending record stored under key to at.
func reschedule(t *testing.T, db *storage.DB, key string, at time.Time) {
	t.Helper()
	onRecord(t, db, key, func(tx *storage.Tx, r *storage.Record) error { return tx.Reschedule(r, at) })
}

// deliver marks the record stored under key delivered at now.
func deliver(t *testing.T, db *storage.DB, key string, now time.Time) {
	t.Helper()
	onRecord(t, db, key, func(tx *storage.Tx, r *storage.Record) error { return tx.MarkDelivered(r, now, time.Hour) })
}

func due(t *testing.T, db *storage.DB, typ string, now time.Time, byKey bool) []string {
	t.Helper()
	var ids []string
	err := db.View(func(tx *storage.Tx) error {
		recs, err := tx.Due(typ, now, 0, storage.Limit{Events: 100}, byKey, nil)
		for _, r := range recs {
			ids = append(ids, r.Event.ID)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

// 500 concurrent writers each store their event, all pending, in no more
// commits than writes; Due gives at most its limit of them.
func TestGroupCommitConcurrentWriters(t *testing.T) {
	db := storagetest.Open(t)
	const n = 500
	var wg sync.WaitGroup
	t0 := time.Unix(1000, 0)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := record(fmt.Sprintf("e%04d", i), "a", t0, "")
			if err := db.Update(ctx, func(tx *storage.Tx) error { return tx.InsertEvent(r, false) }); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if got := len(due(t, db, "a", t0, false)); got != 100 { // limit
		t.Fatalf("due = %d, want 100 (limit)", got)
	}
	db.View(func(tx *storage.Tx) error {
		if q := tx.Queue("a"); q.Pending != n {
			t.Errorf("pending = %d, want %d", q.Pending, n)
		}
		return nil
	})
	if c := db.Commits(); c == 0 || c > n {
		t.Errorf("commits = %d, want 1..%d", c, n)
	}
	t.Logf("%d writes in %d commits", n, db.Commits())
}

// A failing write in a group must not sink the others, and must leave no
// trace of its own.
func TestGroupCommitIsolatesFailures(t *testing.T) {
	db := storagetest.Open(t)
	boom := errors.New("boom")
	var wg sync.WaitGroup
	errs := make([]error, 50)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = db.Update(ctx, func(tx *storage.Tx) error {
				if err := tx.InsertEvent(record(fmt.Sprintf("e%02d", i), "a", time.Unix(1, 0), ""), false); err != nil {
					return err
				}
				if i%5 == 0 {
					return boom // after writing: the group must roll it back
				}
				return nil
			})
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if want := i%5 == 0; want != errors.Is(err, boom) {
			t.Errorf("write %d: err = %v", i, err)
		}
	}
	db.View(func(tx *storage.Tx) error {
		for i := range errs {
			_, err := tx.Record(fmt.Sprintf("e%02d", i))
			if stored := err == nil; stored == (i%5 == 0) {
				t.Errorf("event %d stored = %v", i, stored)
			}
		}
		if q := tx.Queue("a"); q.Pending != 40 {
			t.Errorf("pending = %d, want 40", q.Pending)
		}
		return nil
	})
}

// An event is not stored under an id already taken, even by an event of
// another type: ErrExists.
func TestInsertRefusesTakenID(t *testing.T) {
	db := storagetest.Open(t)
	insert(t, db, record("x", "a", time.Unix(1, 0), ""))
	err := db.Update(ctx, func(tx *storage.Tx) error { return tx.InsertEvent(record("x", "b", time.Unix(2, 0), ""), false) })
	if !errors.Is(err, storage.ErrExists) {
		t.Fatalf("err = %v, want ErrExists", err)
	}
}

// Due lists a type's pending events due by now, in order; a rescheduled
// event is due again only at its new time, a delivered or dead-lettered one
// no more (the DLQ keeping its reason), and a delivered record is removed
// once its TTL has passed, not before.
func TestDueOrderRescheduleDeliverDLQ(t *testing.T) {
	db := storagetest.Open(t)
	t0 := time.Unix(1000, 0)
	insert(t, db, record("1", "a", t0, ""), record("2", "a", t0.Add(time.Second), ""), record("3", "a", t0.Add(2*time.Second), ""), record("b1", "b", t0, ""))
	if got := fmt.Sprint(due(t, db, "a", t0.Add(time.Second), false)); got != "[1 2]" {
		t.Fatalf("due = %s, want [1 2]", got)
	}
	// 1 fails: rescheduled after 3; 2 delivered; 3 dead-lettered.
	err := db.Update(ctx, func(tx *storage.Tx) error {
		r1, _ := tx.Record("1")
		if err := tx.Reschedule(r1, t0.Add(time.Minute)); err != nil {
			return err
		}
		r2, _ := tx.Record("2")
		if err := tx.MarkDelivered(r2, t0, time.Hour); err != nil {
			return err
		}
		r3, _ := tx.Record("3")
		return tx.MoveToDLQ(r3, t0, "bad")
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(due(t, db, "a", t0.Add(time.Hour), false)); got != "[1]" {
		t.Fatalf("due = %s, want [1]", got)
	}
	if got := fmt.Sprint(due(t, db, "a", t0.Add(30*time.Second), false)); got != "[]" {
		t.Fatalf("due before retry time = %s, want []", got)
	}
	db.View(func(tx *storage.Tx) error {
		r3, _ := tx.Record("3")
		if r3.State != storage.StateDLQ || r3.LastError != "bad" || tx.DLQDepth("a") != 1 {
			t.Errorf("3 = %s %q, dlq depth %d", r3.State, r3.LastError, tx.DLQDepth("a"))
		}
		return nil
	})
	// Delivered records expire after their TTL, in chunks.
	n := removed(t, db, func(tx *storage.Tx) (int, error) { return tx.DeleteExpiredDelivered(t0.Add(30*time.Minute), 10) })
	if n != 0 {
		t.Fatalf("expired early: %d", n)
	}
	n = removed(t, db, func(tx *storage.Tx) (int, error) { return tx.DeleteExpiredDelivered(t0.Add(2*time.Hour), 10) })
	if n != 1 {
		t.Fatalf("expired = %d, want 1", n)
	}
	db.View(func(tx *storage.Tx) error {
		if _, err := tx.Record("2"); !errors.Is(err, storage.ErrNotFound) {
			t.Errorf("delivered record still there after TTL: %v", err)
		}
		return nil
	})
}

// NextDue is the due time of a type's first pending event strictly after
// now (a retry's end of backoff), whatever is due before it, and none
// when nothing of the type waits beyond now.
func TestNextDue(t *testing.T) {
	db := storagetest.Open(t)
	t0 := time.Unix(1000, 0)
	insert(t, db, record("1", "a", t0, ""), record("2", "a", t0, ""), record("b1", "b", t0.Add(time.Hour), ""))
	reschedule(t, db, "2", t0.Add(90*time.Second))
	for _, c := range []struct {
		typ  string
		now  time.Time
		want time.Time // zero: none
	}{
		{"a", t0, t0.Add(90 * time.Second)},
		{"a", t0.Add(-time.Second), t0},
		{"a", t0.Add(90 * time.Second), time.Time{}},
		{"b", t0, t0.Add(time.Hour)},
		{"c", t0, time.Time{}},
	} {
		db.View(func(tx *storage.Tx) error {
			got, ok := tx.NextDue(c.typ, c.now)
			if ok != !c.want.IsZero() || !got.Equal(c.want) {
				t.Errorf("NextDue(%s, %s) = %s, %v; want %s", c.typ, c.now, got, ok, c.want)
			}
			return nil
		})
	}
}

// With ordering by key, an event waits behind an earlier one with its key
// that was rescheduled, and is due once that one is delivered; without
// ordering it does not wait.
func TestDueOrderByKey(t *testing.T) {
	db := storagetest.Open(t)
	t0 := time.Unix(1000, 0)
	insert(t, db, record("k1", "a", t0, "k"), record("x", "a", t0, "other"), record("k2", "a", t0, "k"))
	// k1 fails and is rescheduled later: k2 must wait for it.
	reschedule(t, db, "k1", t0.Add(time.Minute))
	if got := fmt.Sprint(due(t, db, "a", t0, true)); got != "[x]" {
		t.Fatalf("due by key = %s, want [x]", got)
	}
	if got := fmt.Sprint(due(t, db, "a", t0, false)); got != "[x k2]" {
		t.Fatalf("due without ordering = %s, want [x k2]", got)
	}
	deliver(t, db, "k1", t0)
	if got := fmt.Sprint(due(t, db, "a", t0, true)); got != "[x k2]" {
		t.Fatalf("due after k1 delivered = %s, want [x k2]", got)
	}
}

// With ordering = "key", a line's first event is taken when it comes due
// after the rest of its line (a retry's backoff): Due passes over the
// events behind it without reading them (linesBehind), never over the
// first itself.
func TestDueTakesALinesFirstDueAfterTheRest(t *testing.T) {
	db := storagetest.Open(t)
	t0 := time.Unix(1000, 0)
	insert(t, db, record("k1", "a", t0, "k"), record("k2", "a", t0, "k"), record("x", "a", t0, "other"),
		record("k3", "a", t0, "k"))
	reschedule(t, db, "k1", t0.Add(30*time.Second))
	if got := fmt.Sprint(due(t, db, "a", t0.Add(time.Minute), true)); got != "[x k1]" {
		t.Fatalf("due by key = %s, want [x k1]: k2 and k3 wait behind k1, which is due", got)
	}
}

// With ordering = "key", an event waits only behind its own tenant's
// events with its key: tenant acme's failing k1 holds back acme's k2, not
// beta's or the default tenant's events with the same key; once k1 is
// delivered, k2 is due.
func TestDueOrderByKeyPerTenant(t *testing.T) {
	db := storagetest.Open(t)
	t0 := time.Unix(1000, 0)
	as := func(tenant string, r *storage.Record) *storage.Record { r.Tenant = tenant; return r }
	insert(t, db, as("acme", record("k1", "a", t0, "k")), as("beta", record("b1", "a", t0, "k")),
		as(storage.DefaultTenant, record("d1", "a", t0, "k")), as("acme", record("k2", "a", t0, "k")))
	reschedule(t, db, "acme/k1", t0.Add(time.Minute))
	if got := fmt.Sprint(due(t, db, "a", t0, true)); got != "[b1 d1]" {
		t.Fatalf("due by key = %s, want [b1 d1]: only acme's k2 waits for acme's k1", got)
	}
	deliver(t, db, "acme/k1", t0)
	if got := fmt.Sprint(due(t, db, "a", t0, true)); got != "[b1 d1 k2]" {
		t.Fatalf("due after k1 delivered = %s, want [b1 d1 k2]", got)
	}
}

// An idempotency record is served until it expires, not after, and the
// cleanup then removes it.
func TestIdempotencyRecordsExpire(t *testing.T) {
	db := storagetest.Open(t)
	t0 := time.Unix(1000, 0)
	rec := &storage.IdemRecord{Digest: []byte{1}, Status: 202, Body: []byte("ok"), CreatedAt: t0, ExpiresAt: t0.Add(time.Hour)}
	db.Update(ctx, func(tx *storage.Tx) error { return tx.ReplaceIdempotency("s", rec, time.Time{}) })
	db.View(func(tx *storage.Tx) error {
		got, err := tx.Idempotency("s", t0.Add(time.Minute))
		if err != nil || string(got.Body) != "ok" {
			t.Errorf("get = %v, %v", got, err)
		}
		if _, err := tx.Idempotency("s", t0.Add(time.Hour)); !errors.Is(err, storage.ErrNotFound) {
			t.Errorf("expired record still served: %v", err)
		}
		return nil
	})
	n := removed(t, db, func(tx *storage.Tx) (int, error) { return tx.DeleteExpiredIdempotency(t0.Add(2*time.Hour), 10) })
	if n != 1 {
		t.Fatalf("cleaned %d, want 1", n)
	}
}

// Early removal goes by when each idempotency record was made, not by its
// expiry: after the window was shortened (24 h, then 2 h), records made
// under the long window lie behind younger ones in the expiry index and are
// still found and removed, walked in chunks; a record made within
// min_window is kept whatever its window; and the walk ends where no
// record made before the cutoff can lie (past the longest window noted).
func TestIdempotencyRecordsMadeBeforeGoEarly(t *testing.T) {
	db := storagetest.Open(t)
	now := time.Unix(100_000, 0)
	cutoff := now.Add(-time.Hour) // min_window 1h
	put := func(scope string, made time.Time, window time.Duration) {
		rec := &storage.IdemRecord{Digest: []byte{1}, Status: 202, CreatedAt: made, ExpiresAt: made.Add(window)}
		if err := db.Update(ctx, func(tx *storage.Tx) error { return tx.ReplaceIdempotency(scope, rec, time.Time{}) }); err != nil {
			t.Fatal(err)
		}
	}
	db.Update(ctx, func(tx *storage.Tx) error { return tx.NoteIdempotencyWindow(24 * time.Hour) })
	db.Update(ctx, func(tx *storage.Tx) error { return tx.NoteIdempotencyWindow(2 * time.Hour) }) // shorter: the 24h stays
	var old, young []string
	for i := range 7 { // under the 24 h window: 3 h to 2.5 h ago (old), and 10 minutes ago (young)
		s := fmt.Sprintf("long-%d", i)
		if i < 5 {
			put(s, now.Add(-3*time.Hour+time.Duration(i)*5*time.Minute), 24*time.Hour)
			old = append(old, s)
		} else {
			put(s, now.Add(-10*time.Minute), 24*time.Hour)
			young = append(young, s)
		}
	}
	for i := range 8 { // under the 2 h window, ahead of all those: 1.5 h ago (old) and 30 minutes ago (young)
		s := fmt.Sprintf("short-%d", i)
		if i < 3 {
			put(s, now.Add(-90*time.Minute), 2*time.Hour)
			old = append(old, s)
		} else {
			put(s, now.Add(-30*time.Minute), 2*time.Hour)
			young = append(young, s)
		}
	}
	total, calls := 0, 0
	var from []byte
	for {
		var n int
		if err := db.Update(ctx, func(tx *storage.Tx) error {
			var err error
			n, from, err = tx.DeleteIdempotencyMadeBefore(cutoff, 2*time.Hour, from, 2)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		total, calls = total+n, calls+1
		if from == nil {
			break
		}
		if calls > 50 {
			t.Fatal("the walk does not end")
		}
	}
	if total != len(old) {
		t.Errorf("removed %d records, want the %d made before the cutoff", total, len(old))
	}
	db.View(func(tx *storage.Tx) error {
		for _, s := range old {
			if _, err := tx.Idempotency(s, now); !errors.Is(err, storage.ErrNotFound) {
				t.Errorf("%s, made before the cutoff, is still there: %v", s, err)
			}
		}
		for _, s := range young {
			if _, err := tx.Idempotency(s, now); err != nil {
				t.Errorf("%s, made within min_window, was removed: %v", s, err)
			}
		}
		return nil
	})
	// Without the 24 h noted, the walk would end at cutoff + 2 h and miss
	// the old records of the long window: the bound is what was noted.
	db2 := storagetest.Open(t)
	rec := &storage.IdemRecord{Digest: []byte{1}, Status: 202, CreatedAt: now.Add(-3 * time.Hour), ExpiresAt: now.Add(21 * time.Hour)}
	db2.Update(ctx, func(tx *storage.Tx) error { return tx.ReplaceIdempotency("long", rec, time.Time{}) })
	n := removed(t, db2, func(tx *storage.Tx) (int, error) {
		n, _, err := tx.DeleteIdempotencyMadeBefore(cutoff, 2*time.Hour, nil, 10)
		return n, err
	})
	if n != 0 {
		t.Errorf("with no longer window noted, the walk went %d records past cutoff + window", n)
	}
	db2.Update(ctx, func(tx *storage.Tx) error { return tx.NoteIdempotencyWindow(24 * time.Hour) })
	n = removed(t, db2, func(tx *storage.Tx) (int, error) {
		n, _, err := tx.DeleteIdempotencyMadeBefore(cutoff, 2*time.Hour, nil, 10)
		return n, err
	})
	if n != 1 {
		t.Errorf("with 24 h noted, removed %d, want the record made 3 h ago", n)
	}
}

// A closed data file refuses a write with ErrClosed.
func TestClosedRefusesWrites(t *testing.T) {
	db := storagetest.Open(t)
	if err := db.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := db.Update(ctx, func(*storage.Tx) error { return nil }); !errors.Is(err, storage.ErrClosed) {
		t.Fatalf("err = %v, want ErrClosed", err)
	}
}

// Concurrent inserts (64 writers per CPU) share group commits: the
// benchmark reports how many writes each commit carries.
func BenchmarkGroupCommit(b *testing.B) {
	db := storagetest.Open(b)
	b.SetParallelism(64)
	var seq sync.Mutex
	n := 0
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			seq.Lock()
			n++
			id := fmt.Sprintf("e%012d", n)
			seq.Unlock()
			r := record(id, "a", time.Unix(1, 0), "")
			if err := db.Update(ctx, func(tx *storage.Tx) error { return tx.InsertEvent(r, false) }); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.ReportMetric(float64(b.N)/float64(db.Commits()), "writes/commit")
}

// Claims lists unexpired claims by tenant, consumer and id, one consumer or
// all, in pages whose cursors neither skip nor repeat a claim.
func TestListClaims(t *testing.T) {
	db := storagetest.Open(t)
	t0 := time.Unix(1000, 0)
	put := func(tenant, consumer, id string, expires time.Time) {
		c := &storage.Claim{State: storage.ClaimHeld, Mode: storage.ClaimEffectivelyOnce, ClaimedAt: t0, LeaseUntil: t0.Add(time.Minute), ExpiresAt: expires}
		if err := db.Update(ctx, func(tx *storage.Tx) error { return tx.PutClaim(tenant, consumer, id, c) }); err != nil {
			t.Fatal(err)
		}
	}
	put("", "billing", "a", t0.Add(time.Hour))
	put("", "billing", "b", t0.Add(time.Hour))
	put("", "billing", "old", t0.Add(-time.Second)) // expired: not listed
	put("", "mail", "c", t0.Add(time.Hour))
	put("acme", "billing", "d", t0.Add(time.Hour))
	list := func(consumer, after string, limit int) (ids []string, next string) {
		db.View(func(tx *storage.Tx) error {
			var from []byte
			if after != "" {
				from = []byte(after)
			}
			got, n, err := tx.Claims(consumer, t0, from, limit)
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range got {
				ids = append(ids, c.Tenant+"/"+c.Consumer+"/"+c.ID)
			}
			next = string(n)
			return nil
		})
		return
	}
	if ids, next := list("billing", "", 10); strings.Join(ids, " ") != "/billing/a /billing/b acme/billing/d" || next != "" {
		t.Fatalf("billing claims = %v (next %q)", ids, next)
	}
	var all []string
	for after := ""; ; {
		ids, next := list("", after, 2)
		all = append(all, ids...)
		if next == "" {
			break
		}
		after = next
	}
	if strings.Join(all, " ") != "/billing/a /billing/b /mail/c acme/billing/d" {
		t.Fatalf("every claim, in pages of 2 = %v", all)
	}
}

// Plugin state: put, get, delete and a TTL; each namespace's usage (keys,
// bytes) follows every change; a scan lists one namespace's keys by prefix
// in order; expired keys are forgotten by cleanup and are never returned.
func TestPluginState(t *testing.T) {
	db := storagetest.Open(t)
	t0 := time.Unix(1000, 0)
	update := func(fn func(tx *storage.Tx) error) {
		t.Helper()
		if err := db.Update(ctx, fn); err != nil {
			t.Fatal(err)
		}
	}
	update(func(tx *storage.Tx) error {
		for _, kv := range []struct{ ns, k, v string }{{"p:a", "k1", "one"}, {"p:a", "k2", "two"}, {"p:a", "x", "ex"}, {"p:b", "k1", "other"}} {
			if err := tx.StatePut(kv.ns, []byte(kv.k), []byte(kv.v), time.Time{}); err != nil {
				return err
			}
		}
		return tx.StatePut("p:a", []byte("short"), []byte("lived"), t0.Add(time.Minute))
	})
	update(func(tx *storage.Tx) error { return tx.StatePut("p:a", []byte("k1"), []byte("uno"), time.Time{}) }) // replaces
	db.View(func(tx *storage.Tx) error {
		if v, ok, _ := tx.StateGet("p:a", []byte("k1"), t0); !ok || string(v) != "uno" {
			t.Errorf("get k1 = %q %v", v, ok)
		}
		if v, ok, _ := tx.StateGet("p:b", []byte("k1"), t0); !ok || string(v) != "other" {
			t.Errorf("namespaces are apart: %q %v", v, ok)
		}
		if _, ok, _ := tx.StateGet("p:a", []byte("short"), t0.Add(time.Hour)); ok {
			t.Error("an expired key is returned")
		}
		if u := tx.StateUsage("p:a"); u.Keys != 4 || u.Bytes != int64(len("k1uno")+len("k2two")+len("xex")+len("shortlived")) {
			t.Errorf("usage of p:a = %+v", u)
		}
		got, _ := tx.StateScan("p:a", []byte("k"), nil, t0, 10)
		if len(got) != 2 || string(got[0].Key) != "k1" || string(got[1].Key) != "k2" {
			t.Errorf("scan k* = %+v", got)
		}
		return nil
	})
	var n int
	update(func(tx *storage.Tx) (err error) { n, err = tx.DeleteExpiredState(t0.Add(time.Hour), 10); return })
	update(func(tx *storage.Tx) error { _, err := tx.StateDelete("p:a", []byte("x")); return err })
	db.View(func(tx *storage.Tx) error {
		if u := tx.StateUsage("p:a"); n != 1 || u.Keys != 2 {
			t.Errorf("after cleanup (%d) and a delete: usage %+v, want 2 keys", n, u)
		}
		return nil
	})
	update(func(tx *storage.Tx) (err error) { n, err = tx.DeleteStatePrefix("p:a", []byte("k"), 10); return })
	db.View(func(tx *storage.Tx) error {
		if ns := tx.StateNamespaces(); n != 2 || len(ns) != 1 || ns["p:b"].Keys != 1 {
			t.Errorf("after deleting k* (%d): namespaces %+v", n, ns)
		}
		return nil
	})
}

// InsertNewEvent stores and queues an event as InsertEvent does, and an
// event it stored is then refused by InsertEvent like any other.
func TestInsertNewEvent(t *testing.T) {
	db := storagetest.Open(t)
	r := record("fresh", "a", time.Unix(1, 0), "")
	if err := db.Update(ctx, func(tx *storage.Tx) error { return tx.InsertNewEvent(r, false) }); err != nil {
		t.Fatal(err)
	}
	db.View(func(tx *storage.Tx) error {
		due, err := tx.Due("a", time.Unix(2, 0), 0, storage.Limit{Events: 10}, false, nil)
		if err != nil || len(due) != 1 || due[0].Event.ID != "fresh" || due[0].State != storage.StatePending || due[0].QueueSeq == 0 {
			t.Fatalf("due after InsertNewEvent: %v %+v", err, due)
		}
		return nil
	})
	err := db.Update(ctx, func(tx *storage.Tx) error { return tx.InsertEvent(record("fresh", "a", time.Unix(2, 0), ""), false) })
	if !errors.Is(err, storage.ErrExists) {
		t.Fatalf("InsertEvent of a stored id: %v, want ErrExists", err)
	}
}

// Queue and done keys built in the transaction's scratch buffer, one after
// another in one transaction, are each stored as they were built (bbolt
// copies a Put's key, so a later key does not overwrite an earlier): the
// events come due in order, leave their queue when delivered, and expire
// in the order of their done keys.
func TestScratchKeysSurviveTheCommit(t *testing.T) {
	db := storagetest.Open(t)
	t0 := time.Unix(1000, 0)
	var recs []*storage.Record
	var want []string
	for i := range 40 {
		id := fmt.Sprintf("e%02d", i)
		recs = append(recs, record(id, "a", t0.Add(time.Duration(i)*time.Second), ""))
		want = append(want, id)
	}
	insert(t, db, recs...)
	if got := fmt.Sprint(due(t, db, "a", t0.Add(time.Hour), false)); got != fmt.Sprint(want) {
		t.Fatalf("due = %s, want %s", got, want)
	}
	// Delivered one by one, each at its own time: done keys in due order.
	err := db.Update(ctx, func(tx *storage.Tx) error {
		for i, id := range want {
			r, err := tx.Record(id)
			if err != nil {
				return err
			}
			if err := tx.MarkDelivered(r, t0.Add(time.Duration(i)*time.Second), time.Hour); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := due(t, db, "a", t0.Add(time.Hour), false); len(got) != 0 {
		t.Fatalf("due after delivery = %v, want none (every queue entry deleted)", got)
	}
	// Half of the done entries expire: exactly the first 20.
	n := removed(t, db, func(tx *storage.Tx) (int, error) {
		return tx.DeleteExpiredDelivered(t0.Add(time.Hour+19*time.Second), 100)
	})
	if n != 20 {
		t.Fatalf("expired = %d, want 20", n)
	}
	db.View(func(tx *storage.Tx) error {
		for i, id := range want {
			_, err := tx.Record(id)
			if gone := errors.Is(err, storage.ErrNotFound); gone != (i < 20) {
				t.Errorf("%s: gone = %v, want %v", id, gone, i < 20)
			}
		}
		return nil
	})
}

// Idempotency expiry keys built in the scratch buffer are stored as built,
// and a replaced record's old expiry entry is deleted by its scratch key:
// the cleanup takes exactly the records whose window ended, and not a
// replaced record at its old time.
func TestScratchIdempotencyExpiryKeys(t *testing.T) {
	db := storagetest.Open(t)
	t0 := time.Unix(1000, 0)
	exp := func(i int) time.Time { return t0.Add(time.Hour + time.Duration(i)*time.Second) }
	rec := func(e time.Time) *storage.IdemRecord {
		return &storage.IdemRecord{Digest: []byte{1}, Status: 202, CreatedAt: t0, ExpiresAt: e}
	}
	scope := func(i int) string { return fmt.Sprintf("i\x00\x00/t\x00e%02d", i) }
	err := db.Update(ctx, func(tx *storage.Tx) error {
		for i := range 20 {
			if err := tx.ReplaceIdempotency(scope(i), rec(exp(i)), time.Time{}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// 10-14 get a new window; their old expiry entries must go.
	err = db.Update(ctx, func(tx *storage.Tx) error {
		for i := 10; i < 15; i++ {
			if err := tx.ReplaceIdempotency(scope(i), rec(t0.Add(2*time.Hour)), exp(i)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	n := removed(t, db, func(tx *storage.Tx) (int, error) {
		return tx.DeleteExpiredIdempotency(t0.Add(time.Hour+30*time.Second), 100)
	})
	if n != 15 {
		t.Fatalf("cleaned %d, want 15 (0-9 and 15-19)", n)
	}
	db.View(func(tx *storage.Tx) error {
		for i := range 20 {
			_, err := tx.Idempotency(scope(i), t0.Add(time.Hour+30*time.Second))
			if kept := err == nil; kept != (i >= 10 && i < 15) {
				t.Errorf("%s: kept = %v (%v)", scope(i), kept, err)
			}
		}
		return nil
	})
}

// writesApart runs n inserts, each started gap after the one before, and
// returns how many commits they made.
func writesApart(t *testing.T, db *storage.DB, n int, gap time.Duration) uint64 {
	t.Helper()
	before := db.Commits()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		r := record(fmt.Sprintf("apart-%d-%d", before, i), "a", time.Unix(1, 0), "")
		wg.Go(func() {
			errs <- db.Update(ctx, func(tx *storage.Tx) error { return tx.InsertEvent(r, false) })
		})
		time.Sleep(gap)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	return db.Commits() - before
}

// With a commit delay, writes that arrive a little apart share a commit:
// eight inserts started 30 ms apart make one or two commits under a 1 s
// delay, and more than that without one.
func TestCommitDelayGroupsWrites(t *testing.T) {
	plain := storagetest.Open(t)
	without := writesApart(t, plain, 8, 30*time.Millisecond)
	db := storagetest.OpenWith(t, storage.Options{CommitDelay: time.Second})
	with := writesApart(t, db, 8, 30*time.Millisecond)
	if with > 2 || with >= without {
		t.Fatalf("8 writes 30 ms apart: %d commits under a 1 s delay, %d without one", with, without)
	}
}

// The delay is a bound, counted from when the writer takes the group: a
// lone write waits it out, writes that keep coming do not stretch it (ten
// writes 40 ms apart under a 200 ms delay make more than one commit), and
// a group of 16 commits at once (under a 5 s delay, 16 concurrent writes
// are back well within a second).
func TestCommitDelayIsABound(t *testing.T) {
	db := storagetest.OpenWith(t, storage.Options{CommitDelay: 200 * time.Millisecond})
	start := time.Now()
	if n := writesApart(t, db, 1, 0); n != 1 {
		t.Fatalf("a lone write: %d commits", n)
	}
	if took := time.Since(start); took < 200*time.Millisecond {
		t.Fatalf("a lone write under a 200 ms delay came back after %v", took)
	}
	if n := writesApart(t, db, 10, 40*time.Millisecond); n < 2 {
		t.Fatalf("10 writes 40 ms apart under a 200 ms delay: %d commit(s); the wait stretched", n)
	}
	big := storagetest.OpenWith(t, storage.Options{CommitDelay: 5 * time.Second})
	start = time.Now()
	if n := writesApart(t, big, 16, 0); n < 1 {
		t.Fatalf("16 writes: %d commits", n)
	}
	if took := time.Since(start); took > 2500*time.Millisecond {
		t.Fatalf("16 concurrent writes under a 5 s delay took %v: a full group waited", took)
	}
}

// A write under Later shares the commit of the next write that comes
// within its wait (one commit for both, where each alone makes one); a
// lone one commits once its wait is over, or once its writer closes its
// hurry channel, not before.
func TestLaterWriteSharesTheNextCommit(t *testing.T) {
	db := storagetest.Open(t)
	insert := func(id string) func(*storage.Tx) error {
		r := record(id, "a", time.Unix(1, 0), "")
		return func(tx *storage.Tx) error { return tx.InsertEvent(r, false) }
	}
	before := db.Commits()
	later := make(chan error, 1)
	go func() { later <- db.Update(storage.Later(ctx, time.Minute, nil), insert("later-1")) }()
	time.Sleep(100 * time.Millisecond) // the later write waits in the writer
	if n := db.Commits() - before; n != 0 {
		t.Fatalf("the write under Later made %d commit(s) alone within its wait", n)
	}
	if err := db.Update(ctx, insert("plain-1")); err != nil {
		t.Fatal(err)
	}
	if err := <-later; err != nil {
		t.Fatal(err)
	}
	if n := db.Commits() - before; n != 1 {
		t.Fatalf("a write under Later and the plain write after it made %d commits, want 1", n)
	}
	if err := db.Update(storage.Later(ctx, 50*time.Millisecond, nil), insert("later-2")); err != nil {
		t.Fatalf("a lone write under Later: %v", err)
	}
	if n := db.Commits() - before; n != 2 {
		t.Fatalf("a lone write under Later made %d commits, want 1", n-1)
	}
	hurry := make(chan struct{})
	go func() { later <- db.Update(storage.Later(ctx, time.Minute, hurry), insert("later-3")) }()
	time.Sleep(100 * time.Millisecond)
	if n := db.Commits() - before; n != 2 {
		t.Fatalf("a write under Later made a commit alone within its wait")
	}
	close(hurry) // its writer learned no write is coming
	if err := <-later; err != nil {
		t.Fatal(err)
	}
	if n := db.Commits() - before; n != 3 {
		t.Fatalf("a hurried write under Later made %d commits, want 1", n-2)
	}
}

// Two writes under Later queued together commit at once: they are each
// other's company (before, they waited for a third, and a hurry of the
// second was not watched: a review saw 951 ms of a 1 s wait).
func TestLaterWritesTogetherDoNotWait(t *testing.T) {
	db := storagetest.Open(t)
	busy, release := make(chan struct{}), make(chan struct{})
	go db.Update(ctx, func(*storage.Tx) error {
		close(busy)
		<-release
		return nil
	})
	<-busy // the writer commits this; the next two queue behind it
	done := make(chan error, 2)
	for i := range 2 {
		r := record(fmt.Sprintf("together-%d", i), "a", time.Unix(1, 0), "")
		go func() {
			done <- db.Update(storage.Later(ctx, time.Minute, nil), func(tx *storage.Tx) error { return tx.InsertEvent(r, false) })
		}()
	}
	time.Sleep(100 * time.Millisecond) // both queued
	close(release)
	for range 2 {
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(20 * time.Second):
			t.Fatal("two writes under Later queued together waited for a third")
		}
	}
}

// A tenant's namespace is its own: the default tenant keeps the bare name,
// every other tenant a name no other tenant (whatever '/', ':' or '@' its
// name holds) and no bare name can equal, and the tenant and base are read
// back from it.
func TestTenantNamespace(t *testing.T) {
	seen := map[string]string{}
	for _, c := range []struct{ tenant, base string }{
		{storage.DefaultTenant, "p:t"}, {"", "p:t"}, {"acme", "p:t"}, {"acme", "shared"},
		{"a/p:t", "x"}, {"a", "p:t/x"}, {"@a", "p:t"}, {"a%2Fb", "p:t"}, {"a/b", "p:t"},
	} {
		ns := storage.TenantNamespace(c.tenant, c.base)
		tenant, base := storage.SplitTenantNamespace(ns)
		if c.tenant == "" {
			c.tenant = storage.DefaultTenant
		}
		if tenant != c.tenant || base != c.base {
			t.Errorf("%q: read back as tenant %q, base %q; want %q, %q", ns, tenant, base, c.tenant, c.base)
		}
		who := c.tenant + " " + c.base
		if other, ok := seen[ns]; ok && other != who {
			t.Errorf("%q is both %s and %s", ns, other, who)
		}
		seen[ns] = who
	}
}

// The pages delivered records leave behind count as reusable room in the
// real file: after 2,000 records of 2 KiB are stored and removed, Used is
// back near where it began and Reusable holds what they took, so the
// min_free budget sees the room the disk's free bytes do not show.
func TestSpaceCountsReusablePages(t *testing.T) {
	db := storagetest.Open(t)
	before, err := db.Space()
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Unix(1000, 0)
	var recs []*storage.Record
	for i := range 2000 {
		r := record(fmt.Sprintf("e%d", i), "a", t0, "")
		r.Event.Data = make([]byte, 2048)
		recs = append(recs, r)
	}
	insert(t, db, recs...)
	full, _ := db.Space()
	err = db.Update(ctx, func(tx *storage.Tx) error {
		for _, r := range recs {
			got, err := tx.Record(r.Event.ID)
			if err != nil {
				return err
			}
			if err := tx.MarkDelivered(got, t0, time.Second); err != nil {
				return err
			}
		}
		_, err := tx.DeleteExpiredDelivered(t0.Add(time.Hour), 10_000)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	db.Update(ctx, func(*storage.Tx) error { return nil }) // the freed pages are released after the next commit
	after, _ := db.Space()
	t.Logf("used %d -> %d -> %d, reusable %d -> %d -> %d", before.Used, full.Used, after.Used, before.Reusable, full.Reusable, after.Reusable)
	if grew := full.Used - before.Used; grew < 2000*2048 || after.Reusable < grew*9/10 || after.Used > before.Used+grew/10 {
		t.Errorf("2,000 records took %d bytes; removed, %d are reusable and %d in use", grew, after.Reusable, after.Used)
	}
}

// Due with ahead also takes the events due within it that have no attempt
// counted (they wait out an outage), never one in a retry's backoff, nor
// one due past it.
func TestDueAheadTakesOnlyOutageWaits(t *testing.T) {
	db := storagetest.Open(t)
	t0 := time.Unix(1000, 0)
	now, waits, backoff, far := record("now", "a", t0, ""), record("waits", "a", t0, ""), record("backoff", "a", t0, ""), record("far", "a", t0, "")
	insert(t, db, now, waits, backoff, far)
	err := db.Update(ctx, func(tx *storage.Tx) error {
		backoff.Attempts = 1
		return errors.Join(tx.Reschedule(waits, t0.Add(10*time.Second)), tx.Reschedule(backoff, t0.Add(10*time.Second)), tx.Reschedule(far, t0.Add(time.Minute)))
	})
	if err != nil {
		t.Fatal(err)
	}
	ids := func(ahead time.Duration) (got []string) {
		db.View(func(tx *storage.Tx) error {
			recs, err := tx.Due("a", t0, ahead, storage.Limit{Events: 10}, false, nil)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range recs {
				got = append(got, r.Event.ID)
			}
			return nil
		})
		return got
	}
	if got := ids(0); fmt.Sprint(got) != "[now]" {
		t.Errorf("due now: %v", got)
	}
	if got := ids(30 * time.Second); fmt.Sprint(got) != "[now waits]" {
		t.Errorf("due now and within 30s without an attempt: %v, want [now waits]", got)
	}
}
