package storage

import (
	"context"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/switchyard-router/switchyard/internal/testkit"
)

// metaPages is where bbolt writes a commit's meta page, last: offset 0 or
// one page. A sync refused below it is the sync after the meta page.
var metaPages = int64(2 * os.Getpagesize())

// count adds one to a counter kept in the data file, in one commit, and
// returns the commit's error.
func count(db *DB) error {
	return db.Update(context.Background(), func(tx *Tx) error {
		n, err := counted(tx)
		if err != nil {
			return err
		}
		return tx.StatePut("test", []byte("n"), binary.BigEndian.AppendUint64(nil, n+1), time.Time{})
	})
}

// counted is the counter count keeps.
func counted(tx *Tx) (uint64, error) {
	v, ok, err := tx.StateGet("test", []byte("n"), time.Now())
	if err != nil || !ok {
		return 0, err
	}
	return binary.BigEndian.Uint64(v), nil
}

// countOf is the counter in the data file at path, opened anew.
func countOf(t *testing.T, path string) uint64 {
	t.Helper()
	db, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close(context.Background())
	var n uint64
	if err := db.View(func(tx *Tx) (err error) { n, err = counted(tx); return err }); err != nil {
		t.Fatal(err)
	}
	return n
}

// openOnSyncFaults opens a data file on a disk whose syncs can be refused.
func openOnSyncFaults(t *testing.T) (*testkit.FaultDisk, *DB) {
	disk := testkit.NewFaultDisk(t)
	db, err := Open(filepath.Join(disk.Dir, "r.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	return disk, db
}

// A commit whose meta page the disk took but whose sync it refused (EIO)
// is applied all the same: bbolt's next transaction starts from it. The
// writer makes it durable with the next commit and answers that it is
// stored, rather than "not stored" for a write that is (a client would
// send it again, a second copy).
func TestACommitWhoseLastSyncFailedIsConfirmed(t *testing.T) {
	disk, db := openOnSyncFaults(t)
	if err := count(db); err != nil {
		t.Fatal(err)
	}
	disk.FailSync(syscall.EIO, metaPages)
	if err := count(db); err != nil {
		t.Errorf("the commit whose meta page's sync failed once: %v, want it confirmed", err)
	}
	if n := disk.SyncsFailed(); n != 1 {
		t.Fatalf("syncs refused: %d, want 1", n)
	}
	if err := db.Writable(); err != nil {
		t.Errorf("Writable after the confirmed commit: %v", err)
	}
	path := db.Path()
	if err := db.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := countOf(t, path); n != 2 {
		t.Fatalf("the counter after a restart: %d, want 2", n)
	}
}

// A commit refused with ENOSPC after its meta page (NFS, a thin pool) is
// not applied a second time in the reserve's room: it was applied once.
func TestACommitRefusedAfterItsMetaPageIsNotAppliedTwice(t *testing.T) {
	disk, db := openOnSyncFaults(t)
	defer db.Close(context.Background())
	if made, err := db.HoldReserve(1 << 20); err != nil || !made {
		t.Fatalf("hold a reserve: made %v, %v", made, err)
	}
	disk.FailSync(syscall.ENOSPC, metaPages)
	if err := count(db); err != nil {
		t.Errorf("the commit refused after its meta page: %v, want it confirmed", err)
	}
	var n uint64
	db.View(func(tx *Tx) (err error) { n, err = counted(tx); return err })
	if n != 1 {
		t.Fatalf("the counter after one count: %d (applied %d times)", n, n)
	}
}

// When the disk refuses the confirming commit's sync too, the writes are
// told ErrUnconfirmed (maybe stored: send again with the same key), not a
// plain failure; the next commit that syncs makes them durable.
func TestACommitTheDiskWillNotConfirmSaysItMayBeStored(t *testing.T) {
	disk, db := openOnSyncFaults(t)
	disk.FailSync(syscall.EIO, metaPages)
	disk.FailSync(syscall.EIO, metaPages)
	err := count(db)
	if !errors.Is(err, ErrUnconfirmed) || !errors.Is(err, syscall.EIO) {
		t.Fatalf("a commit whose sync and confirmation failed: %v, want ErrUnconfirmed and EIO", err)
	}
	if db.Writable() == nil {
		t.Error("Writable says nothing after a commit the disk did not confirm")
	}
	if err := count(db); err != nil {
		t.Fatalf("the next commit: %v", err)
	}
	path := db.Path()
	if err := db.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := countOf(t, path); n != 2 {
		t.Fatalf("the counter after a restart: %d, want 2 (the unconfirmed count made durable by the next)", n)
	}
}
