package engine_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchyard-router/switchyard"
	"github.com/switchyard-router/switchyard/engine"
	"github.com/switchyard-router/switchyard/storage"
)

// Two routes: x.ok always has a stream ("x" below), x.later only once the
// test creates one. No retries and no backoff: a failure is dead at once.
const dlqPolicies = `
event "x.fan" {
  max_retries = 0
  backoff { enabled = false }
  route {
    to      = "nats.local"
    subject = "t.fan"
  }
  route {
    to      = "nats.local"
    subject = "later.fan"
  }
}
event "x.bad" {
  max_retries = 0
  backoff { enabled = false }
  route {
    to      = "nats.local"
    subject = "nowhere.bad"
  }
}
dlq { ttl = "1h" }
`

func (h *harness) pollAll(types ...string) {
	h.t.Helper()
	for _, typ := range types {
		if _, err := h.eng.Loop(typ).Poll(context.Background()); err != nil {
			h.t.Fatal(err)
		}
	}
}

func code(err error) switchyard.Code { return switchyard.ErrorCode(err) }

// A dead letter retried after its cause is fixed is delivered, and the
// output the broker had already acknowledged is not sent again.
func TestDLQRetryAfterFixDoesNotResendAcknowledged(t *testing.T) {
	h := newHarness(t, dlqPolicies, true)
	ctx := context.Background()
	id := h.ingest("x.fan", 1)[0]
	h.pollAll("x.fan")
	it, err := h.eng.DLQGet(engine.DLQRef{ID: id})
	if err != nil {
		t.Fatal(err)
	}
	if it.Record.State != storage.StateDLQ || len(it.Record.History) != 1 || it.Record.LastError == "" ||
		!it.Record.Outputs[0].Delivered || it.Record.Outputs[1].Delivered {
		t.Fatalf("dead letter: %+v", it.Record)
	}
	if _, err := h.js.CreateStream(ctx, jetstream.StreamConfig{Name: "later", Subjects: []string{"later.>"}}); err != nil {
		t.Fatal(err)
	}
	rec, err := h.eng.DLQRetry(ctx, engine.DLQRef{ID: id})
	if err != nil {
		t.Fatal(err)
	}
	if rec.State != storage.StatePending || rec.Attempts != 0 {
		t.Fatalf("retried: %s attempts %d", rec.State, rec.Attempts)
	}
	h.pollAll("x.fan")
	if r := h.record(id); r.State != storage.StateDelivered || !r.Outputs[1].Delivered {
		t.Fatalf("after retry: %s %+v", r.State, r.Outputs)
	}
	if msgs := h.streamMessages(); len(msgs) != 1 {
		t.Fatalf("the acknowledged output was published %d times, want 1", len(msgs))
	}
	// Retrying what is not dead is a state conflict.
	if _, err := h.eng.DLQRetry(ctx, engine.DLQRef{ID: id}); code(err) != switchyard.ENOTINDLQ {
		t.Fatalf("retry of a delivered event: %v", err)
	}
	if _, err := h.eng.DLQGet(engine.DLQRef{ID: id}); code(err) != switchyard.ENOTFOUND {
		t.Fatalf("get of a delivered event: %v", err)
	}
	if _, err := h.eng.DLQGet(engine.DLQRef{ID: "nope"}); code(err) != switchyard.ENOTFOUND {
		t.Fatalf("get of nothing: %v", err)
	}
}

// Paging is newest first with an opaque cursor; bulk actions take a
// filter and run in chunks; resolve keeps a record until dlq { ttl }.
func TestDLQPagingBulkAndResolveTTL(t *testing.T) {
	h := newHarness(t, dlqPolicies, true)
	ctx := context.Background()
	var ids []string
	for range 7 {
		ids = append(ids, h.ingest("x.bad", 1)[0])
		h.pollAll("x.bad")
		h.clock.Advance(time.Second)
	}
	var seen []string
	cursor := ""
	for pages := 0; ; pages++ {
		p, err := h.eng.DLQList(engine.DLQQuery{Limit: 3, Cursor: cursor})
		if err != nil {
			t.Fatal(err)
		}
		for _, it := range p.Items {
			seen = append(seen, it.Record.Event.ID)
		}
		if p.NextCursor == "" {
			if pages != 2 {
				t.Fatalf("%d pages, want 3", pages+1)
			}
			break
		}
		cursor = p.NextCursor
	}
	for i := range ids {
		if seen[i] != ids[len(ids)-1-i] {
			t.Fatalf("order %v, want newest first of %v", seen, ids)
		}
	}
	if _, err := h.eng.DLQList(engine.DLQQuery{Cursor: "garbage"}); code(err) != switchyard.EINVALIDREQUEST {
		t.Fatalf("bad cursor: %v", err)
	}

	// An empty filter is refused.
	if _, err := h.eng.DLQRetryMany(ctx, engine.DLQFilter{}); code(err) != switchyard.EINVALIDREQUEST {
		t.Fatalf("empty filter: %v", err)
	}
	// Resolve two by id (one unknown), then the rest newer than a point.
	res, err := h.eng.DLQResolveMany(ctx, engine.DLQFilter{IDs: []string{ids[0], ids[1], "nope"}})
	if err != nil || res.Done != 2 || len(res.NotFound) != 1 {
		t.Fatalf("resolve by ids: %+v %v", res, err)
	}
	res, err = h.eng.DLQResolveMany(ctx, engine.DLQFilter{IDs: []string{ids[0]}})
	if err != nil || res.Done != 0 || len(res.Skipped) != 1 || res.Skipped[0].Code != switchyard.ENOTINDLQ {
		t.Fatalf("resolve again: %+v %v", res, err)
	}
	res, err = h.eng.DLQDeleteMany(ctx, engine.DLQFilter{Type: "x.bad", Since: h.clock.Now().Add(-2500 * time.Millisecond)})
	if err != nil || res.Done != 2 {
		t.Fatalf("delete since: %+v %v", res, err)
	}
	stats, _ := h.eng.DLQStats()
	if len(stats) != 1 || stats[0] != (engine.DLQTypeStats{Type: "x.bad", DLQ: 3, Resolved: 2}) {
		t.Fatalf("stats %+v", stats)
	}
	// Retry everything left, the resolved ones included.
	res, err = h.eng.DLQRetryMany(ctx, engine.DLQFilter{All: true})
	if err != nil || res.Done != 3 {
		t.Fatalf("retry all: %+v %v", res, err)
	}
	res, err = h.eng.DLQRetryMany(ctx, engine.DLQFilter{IDs: []string{ids[1]}})
	if err != nil || res.Done != 1 {
		t.Fatalf("retry resolved: %+v %v", res, err)
	}
	if r := h.record(ids[2]); r.State != storage.StatePending {
		t.Fatalf("retried: %s", r.State)
	}
	// The last resolved one goes after the TTL (cleanup), not before.
	if _, err := h.eng.Cleanup(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := h.eng.DLQGet(engine.DLQRef{ID: ids[0]}); err != nil {
		t.Fatalf("resolved gone before its TTL: %v", err)
	}
	h.clock.Advance(2 * time.Hour)
	if _, err := h.eng.Cleanup(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := h.eng.EventStatus(storage.DefaultTenant, ids[0]); code(err) != switchyard.ENOTFOUND {
		t.Fatalf("resolved record after TTL: %v", err)
	}
}

// Many dead letters retried by filter cross several chunks.
func TestDLQRetryManyChunks(t *testing.T) {
	h := newHarness(t, dlqPolicies, true)
	ctx := context.Background()
	ids := h.ingest("x.bad", 600)
	for range 3 {
		h.pollAll("x.bad")
	}
	stats, _ := h.eng.DLQStats()
	if len(stats) != 1 || stats[0].DLQ != 600 {
		t.Fatalf("stats %+v", stats)
	}
	res, err := h.eng.DLQRetryMany(ctx, engine.DLQFilter{Type: "x.bad"})
	if err != nil || res.Matched != 600 || res.Done != 600 {
		t.Fatalf("retry: %+v %v", res, err)
	}
	for _, id := range []string{ids[0], ids[299], ids[599]} {
		if r := h.record(id); r.State != storage.StatePending || r.Attempts != 0 {
			t.Fatalf("%s: %s %d", id, r.State, r.Attempts)
		}
	}
}

// Stats, metrics and event status of a stored type the configuration no
// longer has neither panic nor start a loop for it (it has no policy).
func TestStatsOfARemovedType(t *testing.T) {
	h := newHarness(t, dlqPolicies, true)
	ctx := context.Background()
	err := h.db.Update(ctx, func(tx *storage.Tx) error {
		return tx.InsertEvent(&storage.Record{Event: switchyard.Event{ID: "gone-1", Type: "t.gone"}, CreatedAt: h.clock.Now()}, false)
	})
	if err != nil {
		t.Fatal(err)
	}
	stats, err := h.eng.Stats()
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, s := range stats {
		found = found || (s.Type == "t.gone" && s.Pending == 1)
	}
	if !found {
		t.Fatalf("stats %+v", stats)
	}
	if r, err := h.eng.EventStatus(storage.DefaultTenant, "gone-1"); err != nil || r.State != storage.StatePending {
		t.Fatalf("status: %v", err)
	}
}

// The oldest pending age counts from when the event was stored, so it
// grows while events wait out their retries' backoff, as during a sink's
// outage. (It counted from the due time of the event due next: zero while
// every event waited for a retry ahead, however long they had failed.)
func TestOldestPendingAgeGrowsThroughBackoff(t *testing.T) {
	h := newHarness(t, `
event "nostream.down" {
  route {
    to      = "nats.local"
    subject = "nostream.down"
  }
  backoff { delay = "1h" }
}
`, true)
	h.ingest("nostream.down", 1)
	if _, err := h.eng.Loop("nostream.down").Poll(context.Background()); err != nil {
		t.Fatal(err)
	}
	h.clock.Advance(10 * time.Minute)
	stats, err := h.eng.Stats()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range stats {
		if s.Type == "nostream.down" && (s.Pending != 1 || s.OldestPending < 10*time.Minute) {
			t.Errorf("an event stored 10 minutes ago, its retry due in 50: pending %d, oldest age %s", s.Pending, s.OldestPending)
		}
	}
}

// A bulk action's "tenant" selects that tenant's dead letters only, with
// ids or without (it once narrowed only a list of ids, and a filter by
// type and tenant resolved every tenant's); alone it is a filter enough.
func TestDLQBulkByTenant(t *testing.T) {
	h := newHarness(t, dlqPolicies, true)
	ctx := context.Background()
	for _, tenant := range []string{"acme", "beta", storage.DefaultTenant} {
		h.ingestAs(tenant, switchyard.Event{ID: "d1", Type: "x.bad", Source: "/t", SpecVersion: "1.0"})
	}
	h.pollAll("x.bad")
	res, err := h.eng.DLQResolveMany(ctx, engine.DLQFilter{Type: "x.bad", Tenant: "beta"})
	if err != nil || res.Matched != 1 || res.Done != 1 {
		t.Fatalf("type and tenant beta: %+v, %v; want the one of beta", res, err)
	}
	for tenant, want := range map[string]storage.State{"acme": storage.StateDLQ, "beta": storage.StateResolved, storage.DefaultTenant: storage.StateDLQ} {
		if got := h.record(storage.EventKey(tenant, "d1")).State; got != want {
			t.Errorf("%s's d1 is %s, want %s", tenant, got, want)
		}
	}
	res, err = h.eng.DLQRetryMany(ctx, engine.DLQFilter{Tenant: storage.DefaultTenant})
	if err != nil || res.Matched != 1 || res.Done != 1 {
		t.Fatalf("tenant default alone: %+v, %v; want the default tenant's one", res, err)
	}
	if got := h.record(storage.EventKey("acme", "d1")).State; got != storage.StateDLQ {
		t.Errorf("acme's d1 is %s after the default tenant's retry", got)
	}
}

// An id given twice in one bulk action names its dead letter once: a
// delete counted it done and then not found, a retry matched it twice,
// and both ended in an error exit though all was done.
func TestDLQBulkTakesARepeatedIDOnce(t *testing.T) {
	h := newHarness(t, dlqPolicies, true)
	ctx := context.Background()
	h.ingestAs(storage.DefaultTenant, switchyard.Event{ID: "d1", Type: "x.bad", Source: "/t", SpecVersion: "1.0"})
	h.ingestAs(storage.DefaultTenant, switchyard.Event{ID: "d2", Type: "x.bad", Source: "/t", SpecVersion: "1.0"})
	h.pollAll("x.bad")
	res, err := h.eng.DLQRetryMany(ctx, engine.DLQFilter{IDs: []string{"d1", "d1"}})
	if err != nil || res.Matched != 1 || res.Done != 1 || len(res.Skipped) != 0 || len(res.NotFound) != 0 {
		t.Fatalf("retry d1 d1: %+v, %v; want one matched and done", res, err)
	}
	res, err = h.eng.DLQDeleteMany(ctx, engine.DLQFilter{IDs: []string{"d2", "d2"}})
	if err != nil || res.Matched != 1 || res.Done != 1 || len(res.NotFound) != 0 {
		t.Fatalf("delete d2 d2: %+v, %v; want one matched and done", res, err)
	}
}

// A bulk delete that names ids acts only on those in the status it names:
// a delete of the resolved list's selection skips (not_in_dlq) an id dead
// again since, where it deleted the live dead letter (a console trial).
func TestDLQBulkByIDsKeepsToItsStatus(t *testing.T) {
	h := newHarness(t, dlqPolicies, true)
	ctx := context.Background()
	h.ingestAs(storage.DefaultTenant, switchyard.Event{ID: "d1", Type: "x.bad", Source: "/t", SpecVersion: "1.0"})
	h.ingestAs(storage.DefaultTenant, switchyard.Event{ID: "r1", Type: "x.bad", Source: "/t", SpecVersion: "1.0"})
	h.pollAll("x.bad")
	if res, err := h.eng.DLQResolveMany(ctx, engine.DLQFilter{IDs: []string{"r1"}}); err != nil || res.Done != 1 {
		t.Fatalf("resolve r1: %+v, %v", res, err)
	}
	res, err := h.eng.DLQDeleteMany(ctx, engine.DLQFilter{IDs: []string{"d1", "r1"}, Status: storage.StateResolved})
	if err != nil || res.Done != 1 || len(res.Skipped) != 1 || res.Skipped[0].ID != "d1" || res.Skipped[0].Code != switchyard.ENOTINDLQ {
		t.Fatalf("delete resolved d1 r1: %+v, %v; want r1 done, d1 not_in_dlq", res, err)
	}
	if got := h.record(storage.EventKey(storage.DefaultTenant, "d1")).State; got != storage.StateDLQ {
		t.Errorf("d1 is %s, want dlq", got)
	}
	// Without a status the ids name what they name, resolved or not (a
	// review: `router dlq delete r1 r2` of two resolved did nothing).
	h.ingestAs(storage.DefaultTenant, switchyard.Event{ID: "r2", Type: "x.bad", Source: "/t", SpecVersion: "1.0"})
	h.pollAll("x.bad")
	h.eng.DLQResolveMany(ctx, engine.DLQFilter{IDs: []string{"r2"}})
	res, err = h.eng.DLQDeleteMany(ctx, engine.DLQFilter{IDs: []string{"d1", "r2"}})
	if err != nil || res.Done != 2 {
		t.Fatalf("delete d1 r2 without a status: %+v, %v; want both done", res, err)
	}
}

// "all" takes every dead letter and comes alone: with ids or a filter a
// bulk action is refused, nothing done. Before, `router dlq retry d1 -all`
// retried d1 and dropped -all without a word.
func TestDLQBulkAllComesAlone(t *testing.T) {
	h := newHarness(t, dlqPolicies, true)
	ctx := context.Background()
	for _, id := range []string{"d1", "d2"} {
		h.ingestAs(storage.DefaultTenant, switchyard.Event{ID: id, Type: "x.bad", Source: "/t", SpecVersion: "1.0"})
	}
	h.pollAll("x.bad")
	for name, f := range map[string]engine.DLQFilter{
		"ids":    {All: true, IDs: []string{"d1"}},
		"type":   {All: true, Type: "x.bad"},
		"since":  {All: true, Since: time.Now().Add(-time.Hour)},
		"source": {All: true, Source: "/t"},
		"tenant": {All: true, Tenant: "acme"},
	} {
		res, err := h.eng.DLQRetryMany(ctx, f)
		if switchyard.ErrorCode(err) != switchyard.EINVALIDREQUEST || !strings.Contains(err.Error(), `"all" takes every dead letter`) {
			t.Errorf("all with %s: %+v, %v; want it refused", name, res, err)
		}
	}
	for _, id := range []string{"d1", "d2"} {
		if got := h.record(storage.EventKey(storage.DefaultTenant, id)).State; got != storage.StateDLQ {
			t.Errorf("%s is %s after refused requests", id, got)
		}
	}
	if res, err := h.eng.DLQRetryMany(ctx, engine.DLQFilter{All: true, Status: storage.StateDLQ}); err != nil || res.Done != 2 {
		t.Fatalf("all alone (with its status): %+v, %v; want both retried", res, err)
	}
}
