package storage_test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/switchyard-router/switchyard/storage"
	"github.com/switchyard-router/switchyard/storage/storagetest"
)

// tornFile makes a data file of three commits of 100 events and a clean
// stop, then tears its last commit (storagetest.TearLastCommits): what a
// disk that failed as it took the last commit leaves.
func tornFile(t *testing.T) (path string, before []byte) {
	t.Helper()
	path = filepath.Join(t.TempDir(), "router.db")
	db, err := storage.Open(path, storage.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for c := range 3 {
		var recs []*storage.Record
		for i := range 100 {
			recs = append(recs, record(fmt.Sprintf("e-%d-%d", c, i), "t.order", time.Now(), ""))
		}
		insert(t, db, recs...)
	}
	if err := db.Close(ctx); err != nil {
		t.Fatal(err)
	}
	storagetest.TearLastCommits(t, path, 1)
	if before, err = os.ReadFile(path); err != nil {
		t.Fatal(err)
	}
	return path, before
}

// A file whose last commit a disk tore is set back to the commit before,
// which checks, holds every event it held, and is still marked as left by
// a router that did not stop cleanly (the torn commit was the clean stop's).
func TestRollBackATornLastCommit(t *testing.T) {
	path, _ := tornFile(t)
	if rep, err := storage.CheckFile(path); err != nil || len(rep.Problems) == 0 {
		t.Fatalf("the torn file checks: %+v %v", rep, err)
	}
	rb, err := storage.RollBackLastCommit(path)
	if err != nil {
		t.Fatal(err)
	}
	if rb.To+1 != rb.From {
		t.Fatalf("rolled back from %d to %d", rb.From, rb.To)
	}
	rep, err := storage.CheckFile(path) // under the rollback's shared lock
	if err != nil || len(rep.Problems) > 0 || rep.Events != 300 {
		t.Fatalf("after the rollback: %+v %v", rep, err)
	}
	if err := rb.Keep(); err != nil {
		t.Fatal(err)
	}
	db, err := storage.Open(path, storage.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close(ctx)
	if !db.Unclean() {
		t.Fatal("the file rolled back to a running router's commit opens as cleanly stopped")
	}
}

// Undo puts the file back byte for byte, and a file a router has open is
// not rolled back.
func TestRollBackUndoneAndRefused(t *testing.T) {
	path, before := tornFile(t)
	rb, err := storage.RollBackLastCommit(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := rb.Undo(); err != nil {
		t.Fatal(err)
	}
	if after, _ := os.ReadFile(path); !bytes.Equal(after, before) {
		t.Fatal("the undone rollback left the file changed")
	}

	db := storagetest.Open(t)
	if _, err := storage.RollBackLastCommit(db.Path()); err == nil || !strings.Contains(err.Error(), "is open in another process") {
		t.Fatalf("rolling back an open file: %v", err)
	}
}

// A file one of whose meta pages is not valid is refused: bbolt opens it
// by the other already, so there is no earlier commit to go back to.
func TestRollBackRefusesAnInvalidMeta(t *testing.T) {
	path, _ := tornFile(t)
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteAt([]byte{0, 0, 0, 0}, 16) // the first meta's magic, after its page header
	f.Close()
	before, _ := os.ReadFile(path)
	if _, err := storage.RollBackLastCommit(path); err == nil || !strings.Contains(err.Error(), "first meta page is not valid") {
		t.Fatalf("rolling back a file with an invalid meta page: %v", err)
	}
	if after, _ := os.ReadFile(path); !bytes.Equal(after, before) {
		t.Fatal("the refused rollback changed the file")
	}
}

// A rollback cut short (the process ended between writing the meta page
// and keeping or undoing it) is put back by ResumeRollback from the page
// it kept, byte for byte; a kept page the file has since moved on from (a
// router opened the rolled-back file and committed) is only removed.
func TestRollBackCutShortIsPutBack(t *testing.T) {
	path, before := tornFile(t)
	rb, err := storage.RollBackLastCommit(path)
	if err != nil {
		t.Fatal(err)
	}
	// What the process would leave if it ended now: copies of both files.
	cut := filepath.Join(t.TempDir(), "router.db")
	for from, to := range map[string]string{path: cut, storage.RollbackFile(path): storage.RollbackFile(cut)} {
		b, err := os.ReadFile(from)
		if err != nil || os.WriteFile(to, b, 0o600) != nil {
			t.Fatalf("copy %s: %v", from, err)
		}
	}
	said, err := storage.ResumeRollback(cut)
	if err != nil || !strings.Contains(said, "put back") {
		t.Fatalf("resuming the rollback cut short: %q %v", said, err)
	}
	if after, _ := os.ReadFile(cut); !bytes.Equal(after, before) {
		t.Fatal("the rollback cut short was not put back byte for byte")
	}
	if _, err := os.Stat(storage.RollbackFile(cut)); !os.IsNotExist(err) {
		t.Fatalf("the kept page stayed: %v", err)
	}

	kept, _ := os.ReadFile(storage.RollbackFile(path))
	if err := rb.Keep(); err != nil {
		t.Fatal(err)
	}
	db, err := storage.Open(path, storage.Options{})
	if err != nil || db.Close(ctx) != nil {
		t.Fatalf("open the rolled-back file: %v", err)
	}
	moved, _ := os.ReadFile(path)
	os.WriteFile(storage.RollbackFile(path), kept, 0o600)
	if said, err := storage.ResumeRollback(path); err != nil || !strings.Contains(said, "left out") {
		t.Fatalf("a kept page the file moved on from: %q %v", said, err)
	}
	if after, _ := os.ReadFile(path); !bytes.Equal(after, moved) {
		t.Fatal("a stale kept page was written back over a file that moved on")
	}
}

// Undo puts the page back while another process reads the file under a
// shared lock (a db check, a router's start reading it): the lock it holds
// is the shared one, and what it writes is what the file held.
func TestRollBackUndoneUnderAReader(t *testing.T) {
	path, before := tornFile(t)
	rb, err := storage.RollBackLastCommit(path)
	if err != nil {
		t.Fatal(err)
	}
	reader, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close()
	if err := syscall.Flock(int(reader.Fd()), syscall.LOCK_SH|syscall.LOCK_NB); err != nil {
		t.Fatal(err)
	}
	if err := rb.Undo(); err != nil {
		t.Fatal(err)
	}
	if after, _ := os.ReadFile(path); !bytes.Equal(after, before) {
		t.Fatal("the undone rollback left the file changed")
	}
}
