package storage

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// An idempotency record that does not decode is reported as corrupt (not
// as a storage outage to retry), and `router db check` names it.
func TestCorruptIdempotencyRecord(t *testing.T) {
	path := filepath.Join(t.TempDir(), "router.db")
	db, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	now := time.Unix(1000, 0)
	err = db.Update(ctx, func(tx *Tx) error { return tx.bucket(bucketIdem).Put([]byte("i\x00t\x00/s\x00e1"), []byte{9, 9, 9}) })
	if err != nil {
		t.Fatal(err)
	}
	err = db.View(func(tx *Tx) error {
		_, _, err := tx.LiveIdempotency("i\x00t\x00/s\x00e1", now)
		return err
	})
	if !errors.Is(err, ErrCorrupt) {
		t.Fatalf("LiveIdempotency of a damaged record: %v, want ErrCorrupt", err)
	}
	if err := db.Close(ctx); err != nil {
		t.Fatal(err)
	}
	rep, err := CheckFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Problems) != 1 || !strings.Contains(rep.Problems[0], "idempotency record") {
		t.Fatalf("check problems = %q, want the damaged idempotency record", rep.Problems)
	}
}
