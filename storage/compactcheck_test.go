package storage

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/switchyard-router/switchyard/internal/fsperm"
)

// closedFile is a data file that no router has open, where n events were
// stored and the first expired of them delivered and expired.
func closedFile(t *testing.T, n, expired int) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "router.db")
	db, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	insertBatches(t, db, n)
	if expired > 0 {
		deliverAndExpire(t, db, expired)
	}
	if err := db.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	return path
}

// rawUpdate changes the closed data file at path with bbolt itself, as
// damage or a newer router would.
func rawUpdate(t *testing.T, path string, fn func(tx *bolt.Tx) error) {
	t.Helper()
	bdb, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := bdb.Update(fn); err != nil {
		t.Fatal(err)
	}
	if err := bdb.Close(); err != nil {
		t.Fatal(err)
	}
}

// An event stored under a key that is not its own (a flipped bit in the
// key: its id no longer finds it, and a compaction copied it so and
// called the copy consistent) is a problem router db check names.
func TestCheckFindsAnEventUnderAnotherKey(t *testing.T) {
	path := closedFile(t, 10, 0)
	rawUpdate(t, path, func(tx *bolt.Tx) error {
		events := tx.Bucket(bucketEvents)
		k, v := events.Cursor().First()
		moved := append([]byte("x"), k[1:]...)
		v = append([]byte(nil), v...)
		if err := events.Delete(k); err != nil {
			return err
		}
		return events.Put(moved, v)
	})
	rep, err := CheckFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Problems) != 1 || !strings.Contains(rep.Problems[0], "its key is damaged") {
		t.Fatalf("problems %q, want one naming the damaged key", rep.Problems)
	}
}

// A data file of a newer schema (a newer router's) does not check, and
// router run refuses it, both saying a newer router wrote it: check
// called it consistent, and compact and clock -forget wrote it.
func TestANewerSchemaDoesNotCheck(t *testing.T) {
	path := closedFile(t, 1, 0)
	rawUpdate(t, path, func(tx *bolt.Tx) error { return tx.Bucket(bucketMeta).Put(keySchema, []byte("5")) })
	rep, err := CheckFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Problems) != 1 || !strings.Contains(rep.Problems[0], "a newer router wrote it") || rep.Schema != "5" {
		t.Fatalf("schema %q, problems %q, want the newer schema", rep.Schema, rep.Problems)
	}
	if db, err := Open(path, Options{}); err == nil || !strings.Contains(err.Error(), "a newer router wrote it") {
		if db != nil {
			db.Close(context.Background())
		}
		t.Fatalf("open: %v", err)
	}
}

// A compacted file keeps the original's mode, owner and group: bbolt made
// the copy 0600 and root's under sudo, and the service's user could no
// longer open it.
func TestCompactKeepsOwnerAndMode(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("skipped: giving a file to another user needs root")
	}
	path := closedFile(t, 2000, 1900)
	if err := os.Chown(path, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, 0o640); err != nil {
		t.Fatal(err)
	}
	rep, err := CompactFile(path)
	if err != nil || rep.Kept {
		t.Fatalf("compact: %+v %v", rep, err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	uid, _ := fsperm.Owner(fi)
	if fi.Mode().Perm() != 0o640 || uid != 65534 {
		t.Fatalf("after compact: mode %v, uid %d; want 0640 and 65534", fi.Mode().Perm(), uid)
	}
}

// A data file named through a symbolic link is refused, as router run
// refuses it: the compacted copy took the link's place, and the file it
// named kept its size.
func TestCompactRefusesALink(t *testing.T) {
	path := closedFile(t, 1, 0)
	link := filepath.Join(t.TempDir(), "router.db")
	if err := os.Symlink(path, link); err != nil {
		t.Fatal(err)
	}
	if _, err := CompactFile(link); err == nil || !strings.Contains(err.Error(), "is a symbolic link") {
		t.Fatalf("compact through a link: %v", err)
	}
	if fi, err := os.Lstat(link); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Fatalf("the link after: %v %v", fi, err)
	}
}

// A second compaction of a file leaves the first one's copy alone while
// the first holds it (bbolt's lock): it removed it, and both failed after
// copying the whole file.
func TestCompactLeavesAnotherCompactionsCopy(t *testing.T) {
	path := closedFile(t, 1, 0)
	f, err := os.OpenFile(path+".compacting", os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		t.Fatal(err)
	}
	if _, err := CompactFile(path); err == nil || !strings.Contains(err.Error(), "being written by another process") {
		t.Fatalf("compact beside another's copy: %v", err)
	}
	if _, err := os.Stat(path + ".compacting"); err != nil {
		t.Fatalf("the other's copy: %v", err)
	}
}

// A router that opens the file removes a copy a stopped compaction left
// beside it (a SIGKILL mid-copy left 639 MB that nothing mentioned).
func TestOpenRemovesAStoppedCompactionsCopy(t *testing.T) {
	path := closedFile(t, 1, 0)
	if err := os.WriteFile(compactCopyPath(path), make([]byte, 1<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	db, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close(context.Background())
	if _, err := os.Stat(compactCopyPath(path)); !os.IsNotExist(err) {
		t.Fatalf("the stopped compaction's copy after open: %v", err)
	}
}

// Something other than a regular file at the copy's path (a FIFO) is not
// opened to read its lock: the open of a FIFO waited for a writer, and the
// compaction hung (a review).
func TestCompactDoesNotOpenAFIFOInItsWay(t *testing.T) {
	path := closedFile(t, 1, 0)
	if err := syscall.Mkfifo(compactCopyPath(path), 0o600); err != nil {
		t.Skipf("skipped: no FIFO here: %v", err)
	}
	done := make(chan error, 1)
	go func() { _, err := CompactFile(path); done <- err }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("compact beside a FIFO: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("compact beside a FIFO at its copy's path hung")
	}
}
