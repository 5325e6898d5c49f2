package storage

import (
	"context"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/switchyard-router/switchyard/internal/testkit"
)

// On a disk something else filled, a commit that needs new pages fails
// with ENOSPC — unless the data file has a reserve beside it: the writer
// gives it up and commits the same group in the room it held, once.
func TestAFullDiskTakesTheReserve(t *testing.T) {
	dir := testkit.SmallDisk(t, 16<<20)
	db := openIn(t, dir)
	insertBatches(t, db, 2_000)
	write := func() error {
		return db.Update(context.Background(), func(tx *Tx) error {
			for range 500 {
				if err := tx.InsertEvent(diskEvent(time.Now()), false); err != nil {
					return err
				}
			}
			return nil
		})
	}

	// Without a reserve, the full disk refuses the commit.
	filler := testkit.FillDisk(t, dir)
	if err := write(); !IsDiskFull(err) {
		t.Fatalf("a commit on the full disk without a reserve: %v, want ENOSPC", err)
	}
	os.Remove(filler)

	if made, err := db.HoldReserve(1 << 20); err != nil || !made {
		t.Fatalf("hold a reserve: made %v, %v", made, err)
	}
	if made, err := db.HoldReserve(1 << 20); err != nil || made {
		t.Fatalf("hold the reserve again: made %v, %v (it was there)", made, err)
	}
	sp, err := db.Space()
	if err != nil || sp.Reserve != 1<<20 {
		t.Fatalf("the reserve held: %+v %v", sp, err)
	}
	testkit.FillDisk(t, dir)
	if err := write(); err != nil {
		t.Fatalf("a commit on the full disk with a reserve: %v", err)
	}
	if n := db.ReserveReleased(); n != 1 {
		t.Fatalf("reserves given up: %d, want 1", n)
	}
	if sp, _ := db.Space(); sp.Reserve != 0 {
		t.Fatalf("the reserve after it was given up: %d bytes", sp.Reserve)
	}
	if _, err := os.Lstat(reservePath(db.path)); !os.IsNotExist(err) {
		t.Fatalf("the reserve file is still there: %v", err)
	}
}

// A reserve another user put beside the data file before the router's
// first start (a security trial's: a sparse file of the right size in a
// sticky folder, taken as held, 0 bytes reserved and nothing said) is
// refused, naming its owner. (A sparse file of the router's own stays: on
// filesystems that allocate lazily a reserve's blocks may read low.)
func TestAReserveTheRouterDidNotMakeIsNotTaken(t *testing.T) {
	db := openTemp(t)
	path := reservePath(db.path)
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(path, 1<<20); err != nil { // sparse: no block held
		t.Fatal(err)
	}
	if !testkit.GiveToStranger(t, path) {
		return
	}
	if _, err := db.HoldReserve(1 << 20); err == nil || !strings.Contains(err.Error(), "is owned by uid 4242") {
		t.Fatalf("another user's reserve: %v", err)
	}
}

// The delivered records the cleanup can remove to make room are those it
// would remove by then: none in an empty index, and not those a longer
// ttl keeps after a reload lowered it (they sort later, and wait for
// their own time). Delivery waits for the cleanup only while there are
// some (engine's spaceWatch.delivered).
func TestDeliveredRemovableBy(t *testing.T) {
	db := openTemp(t)
	now := time.Now()
	removable := func(ttl time.Duration) (ok bool) {
		db.View(func(tx *Tx) error { ok = tx.DeliveredRemovableBy(now, ttl); return nil })
		return ok
	}
	if removable(24 * time.Hour) {
		t.Fatal("an empty index has records to remove")
	}
	r := diskEvent(now)
	if err := db.Update(context.Background(), func(tx *Tx) error {
		if err := tx.InsertEvent(r, false); err != nil {
			return err
		}
		return tx.MarkDelivered(r, now, 24*time.Hour)
	}); err != nil {
		t.Fatal(err)
	}
	if !removable(24 * time.Hour) {
		t.Error("a record delivered now under the ttl in force is not removable")
	}
	if removable(time.Hour) {
		t.Error("a record kept 24 h by the ttl it was delivered under counts as removable after the ttl was lowered to 1 h")
	}
}

// A quota the file's user or project has used up is a full disk, as no
// free block is (TestAUsedUpQuotaTakesTheReserve has a real one refuse);
// other errors are not.
func TestAQuotaUsedUpIsAFullDisk(t *testing.T) {
	for err, full := range map[error]bool{
		syscall.ENOSPC: true,
		syscall.EDQUOT: true,
		&os.PathError{Op: "write", Path: "router.db", Err: syscall.EDQUOT}:                                         true,
		fmt.Errorf("storage: commit: %w", &os.PathError{Op: "sync", Path: "router.db", Err: syscall.ENOSPC}):       true,
		fmt.Errorf("file resize error: %s", &os.PathError{Op: "truncate", Path: "router.db", Err: syscall.EDQUOT}): true, // bbolt's growth
		syscall.EIO:   false,
		syscall.EROFS: false,
		nil:           false,
	} {
		if got := IsDiskFull(err); got != full {
			t.Errorf("IsDiskFull(%v) = %v, want %v", err, got, full)
		}
	}
}

// A quota used up refuses the commit that grows the file with EDQUOT while
// statfs still shows the disk's room (a user's quota): the writer gives up
// the reserve and commits the same group in the room it held, as on a full
// disk. The quota counts the files' sizes, as a filesystem that allocates
// what a truncate adds does (exFAT, FAT32): it refuses bbolt's growth,
// whose error keeps only the text; before IsDiskFull read it, the commit
// failed.
func TestAUsedUpQuotaTakesTheReserve(t *testing.T) {
	disk := testkit.NewFaultDisk(t)
	db := openIn(t, disk.Dir)
	insertBatches(t, db, 500)
	if made, err := db.HoldReserve(64 << 20); err != nil || !made {
		t.Fatalf("hold a reserve: made %v, %v", made, err)
	}
	disk.Quota(0) // not a byte more than the files hold now
	for i := 0; db.ReserveReleased() == 0; i++ {
		if i == 100 {
			t.Fatalf("100 commits of 500 events and the file never grew (%d bytes)", db.Size())
		}
		err := db.Update(context.Background(), func(tx *Tx) error {
			for range 500 {
				if err := tx.InsertEvent(diskEvent(time.Now()), false); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatalf("commit %d under the used-up quota: %v", i, err)
		}
	}
	if n := disk.QuotaRefusals(); n == 0 {
		t.Fatal("the reserve went, but the quota refused nothing")
	}
	if _, err := os.Lstat(reservePath(db.path)); !os.IsNotExist(err) {
		t.Fatalf("the reserve file is still there: %v", err)
	}
}
