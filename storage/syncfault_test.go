package storage

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/switchyard-router/switchyard/internal/testkit"
)

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

// countOnDisk is the counter in what the disk holds of the data file now
// (a copy of it, opened anew): what a restart after a power cut would find.
func countOnDisk(t *testing.T, disk *testkit.FaultDisk) uint64 {
	t.Helper()
	path := disk.Held(t, "r.db")
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
	t.Cleanup(func() { db.Close(context.Background()) }) // before the disk goes
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
	disk.FailSync(syscall.EIO, testkit.MetaPages)
	if err := count(db); err != nil {
		t.Errorf("the commit whose meta page's sync failed once: %v, want it confirmed", err)
	}
	if n := disk.SyncsFailed(); n != 1 {
		t.Fatalf("syncs refused: %d, want 1", n)
	}
	if err := db.Writable(); err != nil {
		t.Errorf("Writable after the confirmed commit: %v", err)
	}
	if n := countOnDisk(t, disk); n != 2 {
		t.Fatalf("the counter on the disk once the commit was told stored: %d, want 2", n)
	}
}

// A commit refused with ENOSPC after its meta page (NFS, a thin pool) is
// not applied a second time in the reserve's room: it was applied once.
func TestACommitRefusedAfterItsMetaPageIsNotAppliedTwice(t *testing.T) {
	disk, db := openOnSyncFaults(t)
	if made, err := db.HoldReserve(1 << 20); err != nil || !made {
		t.Fatalf("hold a reserve: made %v, %v", made, err)
	}
	disk.FailSync(syscall.ENOSPC, testkit.MetaPages)
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
	disk.FailSync(syscall.EIO, testkit.MetaPages)
	disk.FailSync(syscall.EIO, testkit.MetaPages)
	err := count(db)
	if !errors.Is(err, ErrUnconfirmed) || !errors.Is(err, syscall.EIO) {
		t.Fatalf("a commit whose sync and confirmation failed: %v, want ErrUnconfirmed and EIO", err)
	}
	if db.Writable() == nil {
		t.Error("Writable says nothing after a commit the disk did not confirm")
	}
	if n := countOnDisk(t, disk); n != 0 {
		t.Fatalf("the counter on the disk after the unconfirmed count: %d, want 0 (its meta page not held)", n)
	}
	if err := count(db); err != nil {
		t.Fatalf("the next commit: %v", err)
	}
	if n := countOnDisk(t, disk); n != 2 {
		t.Fatalf("the counter on the disk: %d, want 2 (the unconfirmed count made durable by the next)", n)
	}
}

// A read open across a commit applied though its last sync failed keeps
// its snapshot: bbolt, rolling that commit back, counts the pages it freed
// as free at once, and the commits after it wait for the reads begun
// before it (DB.readers) rather than write over pages they still walk (a
// review: the read saw a later commit's values).
func TestAReadOpenAcrossARefusedSyncKeepsItsSnapshot(t *testing.T) {
	disk, db := openOnSyncFaults(t)
	value := func(tag string, i int) []byte { return bytes.Repeat(fmt.Appendf(nil, "%s%04d", tag, i), 20) }
	put := func(tag string) error {
		return db.Update(context.Background(), func(tx *Tx) error {
			for i := range 300 {
				if err := tx.StatePut("test", fmt.Appendf(nil, "k%04d", i), value(tag, i), time.Time{}); err != nil {
					return err
				}
			}
			return nil
		})
	}
	if err := put("old"); err != nil {
		t.Fatal(err)
	}
	reading, resume, read := make(chan struct{}), make(chan struct{}), make(chan string, 1)
	go func() {
		var bad string
		db.View(func(tx *Tx) error {
			close(reading)
			<-resume
			for i := range 300 {
				v, ok, err := tx.StateGet("test", fmt.Appendf(nil, "k%04d", i), time.Now())
				if err != nil || !ok || !bytes.Equal(v, value("old", i)) {
					bad = fmt.Sprintf("key %d: %v %v %.20q", i, ok, err, v)
					break
				}
			}
			return nil
		})
		read <- bad
	}()
	<-reading
	disk.FailSync(syscall.EIO, testkit.MetaPages)
	if err := put("new"); err != nil { // every leaf the read uses, rewritten
		t.Fatal(err)
	}
	later := make(chan error, 1)
	go func() {
		var err error
		for round := 0; round < 5 && err == nil; round++ { // commits that allocate
			err = put(fmt.Sprint("n", round))
		}
		later <- err
	}()
	select {
	case err := <-later:
		t.Errorf("the commits after the refused sync did not wait for the read begun before it (%v)", err)
	case <-time.After(500 * time.Millisecond):
	}
	close(resume)
	if bad := <-read; bad != "" {
		t.Fatalf("the read open across the refused sync lost its snapshot: %s", bad)
	}
	if err := <-later; err != nil {
		t.Fatal(err)
	}
}

// slowWriter takes each write after a pause, and says when the first
// began.
type slowWriter struct {
	began chan struct{}
	once  sync.Once
	n     int64
}

func (s *slowWriter) Write(p []byte) (int, error) {
	s.once.Do(func() { close(s.began) })
	time.Sleep(100 * time.Millisecond)
	s.n += int64(len(p))
	return len(p), nil
}

// A backup a refused sync overtakes is given up at its next write rather
// than hold the writer, which waits for the reads begun before such a
// commit, for as long as its slow client takes (a review: commits waited
// for the whole backup).
func TestABackupARefusedSyncOvertakesIsGivenUp(t *testing.T) {
	disk, db := openOnSyncFaults(t)
	insertBatches(t, db, 2_000) // a file of some pages: many writes of a backup
	w := &slowWriter{began: make(chan struct{})}
	backedUp := make(chan error, 1)
	go func() {
		_, err := db.Backup(w, nil)
		backedUp <- err
	}()
	<-w.began
	disk.FailSync(syscall.EIO, testkit.MetaPages)
	if err := count(db); err != nil { // confirmed
		t.Fatal(err)
	}
	if err := count(db); err != nil { // after the writer's wait
		t.Fatal(err)
	}
	if err := <-backedUp; !errors.Is(err, ErrBackupOvertaken) {
		t.Fatalf("the backup a refused sync overtook: %v (%d of %d bytes), want ErrBackupOvertaken", err, w.n, db.Size())
	}
}
