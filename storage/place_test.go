package storage

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The data file is never made, nor a compaction written, through what
// another user put at its path: a symbolic link at the data file's path
// is refused (dangling, bbolt made the file where it pointed: in another
// user's folder, which they then emptied out), and a file in the way of a
// new file or a compacted copy that the router may not remove is an error,
// never opened (bbolt wrote the whole data file into another user's
// pre-made file.compacting). Both from a security trial. As root every
// file may be removed, so a non-empty folder stands in for another user's
// file.
func TestNothingIsWrittenThroughAnotherUsersPath(t *testing.T) {
	dir := t.TempDir()
	link := filepath.Join(dir, "linked.db")
	os.Symlink(filepath.Join(t.TempDir(), "elsewhere.db"), link)
	if _, err := Open(link, Options{}); err == nil || !strings.Contains(err.Error(), "is a symbolic link") {
		t.Errorf("a data file path that is a link: %v", err)
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(link), "elsewhere.db")); err == nil {
		t.Error("the file was made where the link points")
	}

	path := filepath.Join(dir, "router.db")
	inTheWay := func(p string) {
		os.MkdirAll(filepath.Join(p, "theirs"), 0o700)
	}
	inTheWay(path + ".new")
	if _, err := Open(path, Options{}); err == nil || !strings.Contains(err.Error(), "router.db.new is in the way") {
		t.Errorf("a new data file with something in the way: %v", err)
	}
	os.RemoveAll(path + ".new")
	db, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	insertBatches(t, db, 100)
	db.Close(context.Background())
	inTheWay(path + ".compacting")
	if _, err := CompactFile(path); err == nil || !strings.Contains(err.Error(), "router.db.compacting is in the way") {
		t.Errorf("a compaction with something in the way: %v", err)
	}
	if _, err := os.Stat(filepath.Join(path+".compacting", "theirs")); err != nil {
		t.Errorf("what was in the way was touched: %v", err)
	}
}
