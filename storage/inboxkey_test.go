package storage

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
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
	db, err := Open(filepath.Join(t.TempDir(), "r.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close(context.Background())
	ctx, now := context.Background(), time.Now().UTC().Truncate(time.Second)
	const inbox, queue, id = "pay", "inbox:pay", "1"
	event := func(source string) switchyard.Event {
		return switchyard.Event{ID: id, Source: source, Type: "payment", SpecVersion: "1.0"}
	}
	old := &Record{Event: event("/billing"), Tenant: DefaultTenant, Queue: queue, CreatedAt: now, UpdatedAt: now, keyByID: true}
	fresh := &Record{Event: event("/shipping"), Tenant: DefaultTenant, Queue: queue, CreatedAt: now, UpdatedAt: now}
	err = db.Update(ctx, func(tx *Tx) error {
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
			key, ok := InboxRefKey(queue, InboxRef(r))
			if got, err := tx.Record(key); !ok || err != nil || got.Event.Source != r.Event.Source {
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
// tail, is refused.
func TestInboxRefKeyRefusesOtherText(t *testing.T) {
	for _, ref := range []string{"", "1", "!!!", "AA", "Ag"} { // "AA" is one 0 byte, "Ag" is 2
		if key, ok := InboxRefKey("inbox:pay", ref); ok {
			t.Errorf("%q names %q; want refused", ref, key)
		}
	}
}
