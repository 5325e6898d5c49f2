package storage

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-router/switchyard"
	bolt "go.etcd.io/bbolt"
)

func sampleRecord() *Record {
	t0 := time.Date(2026, 11, 29, 10, 0, 0, 123, time.UTC)
	return &Record{
		Event: switchyard.Event{
			ID: "01a2", Source: "/shop", Type: "order.created", SpecVersion: "1.0", Subject: "o-1",
			Time: t0, DataContentType: "application/json", DataSchema: "https://x/schema",
			Extensions: []switchyard.Header{{Name: "partitionkey", Value: "c-7"}, {Name: "traceparent", Value: "00-abc"}},
			Data:       []byte(`{"total":12}`),
		},
		Tenant: "acme", IdempotencyKey: "k-1", State: StateDLQ, Attempts: 4,
		CreatedAt: t0, UpdatedAt: t0.Add(time.Second), NextAttemptAt: t0.Add(time.Minute), LastError: "boom", QueueSeq: 99, Queue: "inbox:pay",
		Outputs: []Output{
			{Destination: "nats.local:orders", MsgID: "01a2", Delivered: true, DeliveredAt: t0, Position: &switchyard.Position{Stream: "events", Sequence: 7}},
			{Destination: "kafka.main:orders", LastError: "timeout"},
			{Destination: "kafka.old:orders", LastError: "refused", Abandoned: true},
			{Destination: "kafka.main:audit", Delivered: true, DeliveredAt: t0, Position: &switchyard.Position{Topic: "audit", Partition: 3, Offset: 1 << 40}},
		},
		History: []Attempt{{At: t0, Error: "a"}, {At: t0.Add(time.Second), Error: "b"}},
	}
}

// A record, full or nearly empty, decodes back to itself; cut short at any
// byte it is an error, never a short record.
func TestRecordRoundTrip(t *testing.T) {
	for _, r := range []*Record{sampleRecord(), {Event: switchyard.Event{ID: "x"}}} {
		b, err := encodeRecord(r)
		if err != nil {
			t.Fatal(err)
		}
		got, err := decodeRecord(b)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, r) {
			t.Fatalf("round trip:\n got %+v\nwant %+v", got, r)
		}
		// Truncated input is an error, never a panic or a short record.
		for i := range b {
			if _, err := decodeRecord(b[:i]); err == nil {
				t.Fatalf("decoded a record cut at %d of %d bytes", i, len(b))
			}
		}
	}
}

// An event time comes back as it was stored at both ends of the range a
// record holds and at the Unix epoch itself (whose nanoseconds, 0, also
// mean "no time"); CheckTime refuses a time just outside the range, which
// would come back as another time.
func TestRecordTimes(t *testing.T) {
	for _, tm := range []time.Time{time.Unix(0, 0).UTC(), MinTime, MaxTime.Add(-time.Nanosecond), time.Unix(0, 1).UTC(), {}} {
		r := &Record{Event: switchyard.Event{ID: "x", Time: tm}}
		if err := CheckTime(tm); err != nil {
			t.Errorf("%v: %v", tm, err)
		}
		b, err := encodeRecord(r)
		if err != nil {
			t.Fatal(err)
		}
		got, err := decodeRecord(b)
		if err != nil || !got.Event.Time.Equal(tm) || got.Event.Time.IsZero() != tm.IsZero() {
			t.Errorf("time %v came back as %v (%v)", tm, got.Event.Time, err)
		}
	}
	for _, tm := range []time.Time{MinTime.Add(-time.Nanosecond), MaxTime, time.Date(2300, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(1, 1, 1, 0, 0, 0, 1, time.UTC)} {
		if err := CheckTime(tm); err == nil || !strings.Contains(err.Error(), "outside the years 1678 to 2261") {
			t.Errorf("%v: %v", tm, err)
		}
	}
}

// Whatever bytes decode as a record encode again into bytes that decode.
func FuzzDecodeRecord(f *testing.F) {
	b, _ := encodeRecord(sampleRecord())
	f.Add(b)
	f.Add([]byte{1, 0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Fuzz(func(t *testing.T, v []byte) {
		r, err := decodeRecord(v)
		if err != nil {
			return
		}
		again, err := encodeRecord(r)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := decodeRecord(again); err != nil {
			t.Fatalf("re-encoded record does not decode: %v", err)
		}
	})
}

// A decoded record holds one copy of its bytes: it stays as it was after
// the bytes it was read from change (a page reused after the transaction),
// its data shares that copy with its strings (one allocation of the
// record's size, not two: a memory trial's heap held every taken record
// twice), and writing or appending to its data changes none of them.
func TestADecodedRecordOwnsOneCopy(t *testing.T) {
	r := sampleRecord()
	r.Event.Data = bytes.Repeat([]byte("d"), 64<<10)
	v, err := encodeRecord(r)
	if err != nil {
		t.Fatal(err)
	}
	got, err := decodeRecord(v)
	if err != nil {
		t.Fatal(err)
	}
	clear(v) // the page, reused
	if got.Event.ID != r.Event.ID || got.Tenant != r.Tenant || got.Outputs[0].Destination != r.Outputs[0].Destination || !bytes.Equal(got.Event.Data, r.Event.Data) {
		t.Fatalf("the decoded record changed with the bytes it was read from: %+v", got.Event)
	}
	got.Event.Data[0] = 'x'
	grown := append(got.Event.Data, 'y')
	grown[1] = 'z'
	if got.Event.ID != r.Event.ID || got.Outputs[0].Destination != r.Outputs[0].Destination || got.Event.Data[1] != 'd' {
		t.Fatal("writing or appending to the data changed another field")
	}
	v2, _ := encodeRecord(r)
	const n = 16
	kept := make([]*Record, n)
	before := new(runtime.MemStats)
	runtime.ReadMemStats(before)
	for i := range kept {
		kept[i], _ = decodeRecord(v2)
	}
	after := new(runtime.MemStats)
	runtime.ReadMemStats(after)
	if perRecord := (after.TotalAlloc - before.TotalAlloc) / n; perRecord > uint64(len(v2))*3/2 {
		t.Errorf("a record of %d bytes decoded into %d bytes allocated, want about one copy", len(v2), perRecord)
	}
	runtime.KeepAlive(kept)
}

// A record read without its data is the record but for its data, with
// none, empty or large data, and copies none of the data's bytes; a
// record cut short is an error either way.
func TestARecordReadWithoutItsData(t *testing.T) {
	for _, data := range [][]byte{nil, {}, bytes.Repeat([]byte("d"), 256<<10)} {
		r := sampleRecord()
		r.Event.Data = data
		v, err := encodeRecord(r)
		if err != nil {
			t.Fatal(err)
		}
		whole, err := decodeRecord(v)
		if err != nil {
			t.Fatal(err)
		}
		before := new(runtime.MemStats)
		runtime.ReadMemStats(before)
		slim, err := decodeRecordWithoutData(v)
		after := new(runtime.MemStats)
		runtime.ReadMemStats(after)
		if err != nil {
			t.Fatal(err)
		}
		if slim.Event.Data != nil {
			t.Fatalf("%d bytes of data read", len(slim.Event.Data))
		}
		whole.Event.Data = nil
		if !reflect.DeepEqual(slim, whole) {
			t.Fatalf("without its data:\n%+v\nwhole:\n%+v", slim, whole)
		}
		if took := after.TotalAlloc - before.TotalAlloc; len(data) > 0 && took > uint64(len(data))/16 {
			t.Errorf("a record of %d bytes (%d of data) read without its data allocated %d bytes", len(v), len(data), took)
		}
		if _, err := decodeRecordWithoutData(v[:len(v)-1]); err == nil {
			t.Error("a record cut short read without an error")
		}
	}
}

// BenchmarkRecordCodec measures encoding and decoding one record as the hot
// path meets it: an ingested event (400 bytes of data) with one delivered
// output.
func BenchmarkRecordCodec(b *testing.B) {
	r := sampleRecord()
	r.Event.Data = make([]byte, 400)
	r.Outputs, r.History = r.Outputs[:1], nil
	v, err := encodeRecord(r)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("encode", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := encodeRecord(r); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("decode", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := decodeRecord(v); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// An idempotency record reads back as written in the binary encoding, and
// one a router wrote before (JSON) still reads the same; a truncated or
// unknown record is an error, not a wrong record.
func TestIdemRecordEncodings(t *testing.T) {
	t0 := time.Date(2026, 11, 29, 10, 0, 0, 123, time.UTC)
	for _, r := range []*IdemRecord{
		{Digest: []byte{1, 2, 3}, Status: 202, ContentType: "application/json", Body: []byte(`{"id":"a"}` + "\n"),
			EventIDs: []string{"a", "b"}, CreatedAt: t0, ExpiresAt: t0.Add(24 * time.Hour)},
		{Digest: []byte{9}, EventIDs: []string{"only"}, CreatedAt: t0, ExpiresAt: t0.Add(time.Hour)},
	} {
		jsonForm, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		for name, v := range map[string][]byte{"binary": encodeIdem(r), "json": jsonForm} {
			got, err := decodeIdem(v)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if !reflect.DeepEqual(got, r) {
				t.Fatalf("%s: read %+v, wrote %+v", name, got, r)
			}
		}
		b := encodeIdem(r)
		for _, bad := range [][]byte{b[:len(b)-1], append([]byte{7}, b[1:]...), append(b, 0)} {
			if got, err := decodeIdem(bad); err == nil {
				t.Fatalf("corrupt record %x read as %+v", bad, got)
			}
		}
	}
}

// A data file at schema 1 (JSON idempotency records) or 3 (inbox records
// keyed by id alone) opens, is marked with the current schema, and its
// records still read; a schema this
// router does not know is refused at open, before anything is read or
// written.
func TestSchemaUpgradeAndRefusal(t *testing.T) {
	path := filepath.Join(t.TempDir(), "r.db")
	setSchema := func(v string, seed func(*bolt.Tx) error) {
		t.Helper()
		b, err := bolt.Open(path, 0o600, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		if err := b.Update(func(tx *bolt.Tx) error {
			if err := tx.Bucket(bucketMeta).Put(keySchema, []byte(v)); err != nil {
				return err
			}
			if seed != nil {
				return seed(tx)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	db, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if was := db.UpgradedFrom(); was != "" {
		t.Errorf("a new file was upgraded from %q", was)
	}
	db.Close(context.Background())
	if db, err = Open(path, Options{}); err != nil || db.UpgradedFrom() != "" {
		t.Fatalf("a file at this schema: %v, upgraded from %q", err, db.UpgradedFrom())
	}
	db.Close(context.Background())

	t0 := time.Now().UTC().Truncate(time.Second)
	old, _ := json.Marshal(&IdemRecord{Digest: []byte{1}, Status: 202, EventIDs: []string{"e"}, CreatedAt: t0, ExpiresAt: t0.Add(time.Hour)})
	setSchema("1", func(tx *bolt.Tx) error { return tx.Bucket(bucketIdem).Put([]byte("scope"), old) })
	db, err = Open(path, Options{})
	if err != nil {
		t.Fatalf("a schema 1 file: %v", err)
	}
	if was := db.UpgradedFrom(); was != "1" {
		t.Errorf("a schema 1 file opened: upgraded from %q", was)
	}
	db.View(func(tx *Tx) error {
		if v := string(tx.tx.Bucket(bucketMeta).Get(keySchema)); v != SchemaVersion {
			t.Errorf("schema after open = %q, want %q", v, SchemaVersion)
		}
		if r, err := tx.Idempotency("scope", t0); err != nil || r.Status != 202 || r.EventIDs[0] != "e" {
			t.Errorf("the schema 1 record reads %+v, %v", r, err)
		}
		return nil
	})
	db.Close(context.Background())

	// A file at schema 3 opens at 4, its inbox records (keyed by their ids
	// alone) found by source and id.
	legacy := &Record{Event: switchyard.Event{ID: "1", Source: "/billing", Type: "payment", SpecVersion: "1.0"}, Tenant: DefaultTenant, Queue: "inbox:pay", State: StatePending, CreatedAt: t0, UpdatedAt: t0, keyByID: true}
	v, _ := encodeRecord(legacy)
	setSchema("3", func(tx *bolt.Tx) error {
		return tx.Bucket(bucketEvents).Put([]byte(idOnlyInboxKey("inbox:pay", "1")), v)
	})
	if db, err = Open(path, Options{}); err != nil {
		t.Fatalf("a schema 3 file: %v", err)
	}
	db.View(func(tx *Tx) error {
		if v := string(tx.tx.Bucket(bucketMeta).Get(keySchema)); v != SchemaVersion {
			t.Errorf("schema after open = %q, want %q", v, SchemaVersion)
		}
		if r, err := tx.InboxRecord("inbox:pay", "/billing", "1"); err != nil || !r.keyByID || r.State != StatePending {
			t.Errorf("the schema 3 inbox record reads %+v, %v", r, err)
		}
		return nil
	})
	db.Close(context.Background())

	setSchema("5", nil)
	if db, err := Open(path, Options{}); err == nil || !strings.Contains(err.Error(), `data file schema "5"`) {
		if db != nil {
			db.Close(context.Background())
		}
		t.Fatalf("a schema 5 file: %v, want a refusal naming it", err)
	}
}
