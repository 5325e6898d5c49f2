package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/switchyard-router/switchyard"
	"github.com/switchyard-router/switchyard/storage"
)

// `router db clock` shows the time a data file's router last gave and how
// far it is ahead of the system's clock; -forget removes it (refused while
// a router holds the file, and on a file whose last router did not stop
// cleanly), after which the file has none and the next router starts at
// the system clock's time.
func TestDBClock(t *testing.T) {
	path := filepath.Join(t.TempDir(), "router.db")
	db, err := storage.Open(path, storage.Options{})
	if err != nil {
		t.Fatal(err)
	}
	db.SeeTime(time.Now().Add(48 * time.Hour))
	run := func(args ...string) (string, error) {
		var out bytes.Buffer
		err := NewMain(nil, &out, &out).Run(context.Background(), append([]string{"db", "clock", path}, args...))
		return out.String(), err
	}
	if _, err := run("-forget"); err == nil || !strings.Contains(err.Error(), "is open in another process (a running router, or router db compact, check, clock or rollback): stop it first") {
		t.Fatalf("db clock -forget on a file a router holds: %v", err)
	}
	// A copy taken while the router runs is a file whose last router did
	// not stop cleanly: -forget leaves it to a router's check first.
	unclean := filepath.Join(t.TempDir(), "unclean.db")
	if b, err := os.ReadFile(path); err != nil || os.WriteFile(unclean, b, 0o600) != nil {
		t.Fatal(err)
	}
	var said bytes.Buffer
	if err := NewMain(nil, &said, &said).Run(context.Background(), []string{"db", "clock", unclean, "-forget"}); err == nil || !strings.Contains(err.Error(), "did not stop cleanly") {
		t.Fatalf("db clock -forget on a file left unclean: %v\n%s", err, said.String())
	}
	if err := db.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if out, err := run(); err != nil || !strings.Contains(out, "47h59m") && !strings.Contains(out, "48h0m0s ahead of this system's clock") {
		t.Fatalf("db clock: %v\n%s", err, out)
	}
	out, err := run("-o", "json")
	var rep clockReport
	if err != nil || json.Unmarshal([]byte(out), &rep) != nil || rep.AheadOfSystem < 47*3600 || rep.Clock.IsZero() {
		t.Fatalf("db clock -o json: %v %+v\n%s", err, rep, out)
	}
	if out, err := run("-forget"); err != nil || !strings.Contains(out, "forgotten") {
		t.Fatalf("db clock -forget: %v\n%s", err, out)
	}
	if mark, err := storage.ReadClock(path); err != nil || !mark.IsZero() {
		t.Fatalf("after -forget the file keeps %v (%v)", mark, err)
	}
	if out, err := run(); err != nil || !strings.Contains(out, "no clock kept") {
		t.Fatalf("db clock after -forget: %v\n%s", err, out)
	}
}

// router db compact and db clock -forget check a data file before they
// write it, and leave one that does not check as it is: compact copied an
// event stored under a damaged key into a file that then checked (its id
// no longer found it), and clock -forget stopped with bbolt's panic on a
// damaged page.
func TestToolsThatWriteLeaveAFileThatDoesNotCheck(t *testing.T) {
	path := filepath.Join(t.TempDir(), "router.db")
	db, err := storage.Open(path, storage.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(context.Background(), func(tx *storage.Tx) error {
		return tx.InsertEvent(&storage.Record{CreatedAt: time.Now(), Event: switchyard.Event{ID: "e1", Type: "t", Source: "/s", SpecVersion: "1.0"}}, false)
	}); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	bdb, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := bdb.Update(func(tx *bolt.Tx) error {
		events := tx.Bucket([]byte("events"))
		v := append([]byte(nil), events.Get([]byte("e1"))...)
		return errors.Join(events.Delete([]byte("e1")), events.Put([]byte("f1"), v))
	}); err != nil {
		t.Fatal(err)
	}
	bdb.Close()
	before, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"db", "compact", path}, {"db", "clock", path, "-forget"}} {
		var out bytes.Buffer
		err := NewMain(nil, &out, &out).Run(context.Background(), args)
		if err == nil || !strings.Contains(err.Error(), "does not check") || !strings.Contains(err.Error(), "its key is damaged") {
			t.Fatalf("%q: %v\n%s", args, err, out.String())
		}
		if after, _ := os.ReadFile(path); !bytes.Equal(before, after) {
			t.Fatalf("%q changed the file", args)
		}
	}
}
