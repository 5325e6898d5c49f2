package storage

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-router/switchyard"
)

// An inbox's record and id stored before schema 4, keyed by the id alone,
// still read beside the new ones: the id counts as seen for its record's
// source only, the record is found by its source and id and by its id,
// keeps its key when it changes (no second copy under the new key), and
// an ack id names each of the two records that share the id.
func TestInboxRecordsKeyedByIDAloneStillRead(t *testing.T) {
	db := openTemp(t)
	ctx, now := context.Background(), time.Now().UTC().Truncate(time.Second)
	const inbox, queue, id = "pay", "inbox:pay", "1"
	event := func(source string) switchyard.Event {
		return switchyard.Event{ID: id, Source: source, Type: "payment", SpecVersion: "1.0"}
	}
	old := &Record{Event: event("/billing"), Tenant: DefaultTenant, Queue: queue, CreatedAt: now, UpdatedAt: now, keyByID: true}
	fresh := &Record{Event: event("/shipping"), Tenant: DefaultTenant, Queue: queue, CreatedAt: now, UpdatedAt: now}
	err := db.Update(ctx, func(tx *Tx) error {
		seen, _ := json.Marshal(&Seen{Origin: "nats.local:t.pay#1", ReceivedAt: now, ExpiresAt: now.Add(time.Hour)})
		if err := tx.bucket(bucketInboxIDs).Put([]byte(idOnlyInboxKey(inbox, id)), seen); err != nil {
			return err
		}
		if err := tx.InsertEvent(old, false); err != nil {
			return err
		}
		return tx.InsertEvent(fresh, false)
	})
	if err != nil {
		t.Fatal(err)
	}
	db.View(func(tx *Tx) error {
		if _, err := tx.InboxSeen(inbox, queue, "/billing", id, now); err != nil {
			t.Errorf("the old id, for its record's source: %v; want seen", err)
		}
		if _, err := tx.InboxSeen(inbox, queue, "/shipping", id, now); !errors.Is(err, ErrNotFound) {
			t.Errorf("the old id, for another source: %v; want not seen", err)
		}
		if r, err := tx.InboxRecord(queue, "/billing", id); err != nil || !r.keyByID {
			t.Errorf("the old record by source and id: %+v, %v", r, err)
		}
		if recs, err := tx.InboxRecords(queue, id); err != nil || len(recs) != 2 {
			t.Errorf("the records of the id: %d, %v; want the old and the new", len(recs), err)
		}
		for _, r := range []*Record{old, fresh} {
			if got, err := tx.InboxRecordByRef(queue, InboxRef(r)); err != nil || got.Event.Source != r.Event.Source {
				t.Errorf("the ack id of the %s record names %+v, %v", r.Event.Source, got, err)
			}
		}
		return nil
	})
	if err := db.Update(ctx, func(tx *Tx) error { return tx.MarkDelivered(old, now, time.Hour) }); err != nil {
		t.Fatal(err)
	}
	db.View(func(tx *Tx) error {
		if n := tx.bucket(bucketEvents).Stats().KeyN; n != 2 {
			t.Errorf("%d records after the old one changed; want 2 (no copy under a new key)", n)
		}
		for key, want := range map[string]byte{idOnlyInboxKey(queue, id): recordVersion, inboxKey(queue, "/shipping", id): recordVersionScoped} {
			if v := tx.getEvent([]byte(key)); len(v) == 0 || v[0] != want {
				t.Errorf("the record under %q: version %v, want %d", key, v[:min(len(v), 1)], want)
			}
		}
		if r, err := tx.InboxRecord(queue, "/billing", id); err != nil || r.State != StateDelivered {
			t.Errorf("the old record after the change: %+v, %v", r, err)
		}
		return nil
	})
}

// The ack ids a client sends back name records of the inbox only: text
// that does not decode, or decodes to something other than an inbox key's
// tail, is refused, and so is one that names another queue's record or an
// outbound event (a tenant named "inbox:pay\x01\x01x" once made the key
// of its event "y" the inbox key of id "x" from source "/y"; a review).
func TestInboxRecordByRefNamesTheInboxsRecordsOnly(t *testing.T) {
	db := openTemp(t)
	now := time.Now().UTC()
	outbound := &Record{Event: switchyard.Event{ID: "y", Source: "/s", Type: "t", SpecVersion: "1.0"}, Tenant: "inbox:pay\x01\x01x", CreatedAt: now, UpdatedAt: now}
	other := &Record{Event: switchyard.Event{ID: "1", Source: "/s", Type: "t", SpecVersion: "1.0"}, Tenant: DefaultTenant, Queue: "inbox:other", CreatedAt: now, UpdatedAt: now}
	if err := db.Update(context.Background(), func(tx *Tx) error {
		if err := tx.InsertEvent(outbound, false); err != nil {
			return err
		}
		return tx.InsertEvent(other, false)
	}); err != nil {
		t.Fatal(err)
	}
	refs := []string{"", "1", "!!!", "AA", "Ag", InboxRef(other), base64.RawURLEncoding.EncodeToString([]byte(strings.TrimPrefix(outbound.Key(), "inbox:pay")))}
	db.View(func(tx *Tx) error {
		for _, ref := range refs {
			if r, err := tx.InboxRecordByRef("inbox:pay", ref); !errors.Is(err, ErrNotFound) {
				t.Errorf("ack id %q in inbox:pay names %+v, %v; want not found", ref, r, err)
			}
		}
		if recs, err := tx.InboxRecords("inbox:pay", "x"); err != nil || len(recs) != 0 {
			t.Errorf("inbox:pay's records of id x: %d, %v; want none (the outbound event is not one)", len(recs), err)
		}
		return nil
	})
}

// A record of the old form goes through its whole life under its old key:
// to the DLQ, back to its queue, delivered and removed after its ttl, with
// the message id (a local service's Idempotency-Key) its earlier attempts
// had; and an id of the old form leaves the ids index with its window.
func TestOldFormInboxRecordLivesUnderItsKey(t *testing.T) {
	db := openTemp(t)
	ctx, now := context.Background(), time.Now().UTC().Truncate(time.Second)
	const queue = "inbox:pay"
	old := &Record{Event: switchyard.Event{ID: "1", Source: "/billing", Type: "payment", SpecVersion: "1.0"}, Tenant: DefaultTenant, Queue: queue, CreatedAt: now, UpdatedAt: now, keyByID: true}
	if got := old.MsgID(); got != "1" {
		t.Errorf("the old record's message id %q, want its id", got)
	}
	step := func(what string, fn func(tx *Tx) error) {
		t.Helper()
		if err := db.Update(ctx, fn); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	step("store", func(tx *Tx) error {
		seen, _ := json.Marshal(&Seen{ReceivedAt: now, ExpiresAt: now.Add(time.Minute)})
		k := []byte(idOnlyInboxKey("pay", "1"))
		if err := tx.bucket(bucketInboxIDs).Put(k, seen); err != nil {
			return err
		}
		if err := tx.bucket(bucketInboxExp).Put(timeKey(now.Add(time.Minute), k), nil); err != nil {
			return err
		}
		return tx.InsertEvent(old, false)
	})
	step("to the DLQ", func(tx *Tx) error { return tx.MoveToDLQ(old, now, "refused") })
	step("retried", func(tx *Tx) error {
		en, err := tx.DLQEntry(idOnlyInboxKey(queue, "1"))
		if err != nil {
			return err
		}
		return tx.RetryDeadLetter(en.Record, now, false)
	})
	step("delivered", func(tx *Tx) error {
		due, err := tx.Due(queue, now.Add(time.Second), 0, Limit{Events: 10}, false, nil)
		if err != nil || len(due) != 1 || due[0].Key() != idOnlyInboxKey(queue, "1") {
			return fmt.Errorf("due: %d records, %v; want the old one under its key", len(due), err)
		}
		return tx.MarkDelivered(due[0], now, time.Minute)
	})
	db.View(func(tx *Tx) error {
		if n := tx.bucket(bucketEvents).Stats().KeyN; n != 1 {
			t.Errorf("%d records after its life's steps; want 1", n)
		}
		return nil
	})
	step("expired", func(tx *Tx) error {
		if n, err := tx.DeleteExpiredDelivered(now.Add(2*time.Minute), 10); err != nil || n != 1 {
			return fmt.Errorf("delivered records removed: %d, %v; want 1", n, err)
		}
		if n, err := tx.DeleteExpiredInboxIDs(now.Add(2*time.Minute), 10); err != nil || n != 1 {
			return fmt.Errorf("ids forgotten: %d, %v; want 1", n, err)
		}
		return nil
	})
	db.View(func(tx *Tx) error {
		if n := tx.bucket(bucketEvents).Stats().KeyN + tx.bucket(bucketInboxIDs).Stats().KeyN; n != 0 {
			t.Errorf("%d records and ids left; want none", n)
		}
		return nil
	})
}

// An inbox record's message id (a local service's Idempotency-Key) is its
// source and id, "<source>#<id>", each percent-encoded as a CloudEvents
// header's value and the source's '#' as %23, printable ASCII: two events
// share it only if they share both, whatever their bytes.
func TestInboxMsgIDNamesSourceAndID(t *testing.T) {
	msgID := func(source, id string) string {
		r := &Record{Event: switchyard.Event{ID: id, Source: source}, Queue: "inbox:pay"}
		return r.MsgID()
	}
	for _, c := range []struct{ source, id, want string }{
		{"/billing", "1", "/billing#1"},
		{"/a#b", "c-0", "/a%23b#c-0"},
		{"/s%p ace", "é 1", "/s%25p%20ace#%C3%A9%201"},
		{`/"q"`, "a#b", "/%22q%22#a#b"},
	} {
		if got := msgID(c.source, c.id); got != c.want {
			t.Errorf("source %q, id %q: message id %q, want %q", c.source, c.id, got, c.want)
		}
	}
	for _, pair := range [][2][2]string{
		{{"/a#b", "c"}, {"/a", "b#c"}},
		{{"/a%23b", "c"}, {"/a#b", "c"}},
		{{"/a", "b c"}, {"/a", "b%20c"}},
		{{"/billing", "1"}, {"/shipping", "1"}},
	} {
		if a, b := msgID(pair[0][0], pair[0][1]), msgID(pair[1][0], pair[1][1]); a == b {
			t.Errorf("%v and %v share the message id %q", pair[0], pair[1], a)
		}
	}
}

// The MsgID an inbox's record had before it encoded source and id whole
// is known (outputs recorded under it count as delivered): the source's
// '%' and '#' escaped and the id as it is, or the id alone for a record
// keyed by its id; none where nothing changed, or for an outbound event.
func TestInboxMsgIDBefore202612(t *testing.T) {
	rec := func(source, id string, keyByID bool) *Record {
		return &Record{Event: switchyard.Event{ID: id, Source: source}, Queue: "inbox:pay", keyByID: keyByID}
	}
	for _, c := range []struct {
		r    *Record
		want string
	}{
		{rec("/a b#c", "x y", false), "/a b%23c#x y"},
		{rec("/billing", "1", false), ""},
		{rec("/billing", "x y", true), "x y"},
		{rec("/billing", "xy", true), ""},
		{&Record{Event: switchyard.Event{ID: "x y", Source: "/s"}}, ""},
	} {
		if got := c.r.InboxMsgIDBefore202612(); got != c.want {
			t.Errorf("source %q id %q (by id %v): %q, want %q", c.r.Event.Source, c.r.Event.ID, c.r.keyByID, got, c.want)
		}
	}
}
