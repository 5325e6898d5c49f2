package storagetest

import (
	"os"
	"testing"

	"github.com/switchyard-router/switchyard/storage"
)

// TearLastCommits zeroes the root pages that only the last n (1 or 2)
// commits of the data file at path wrote (bbolt copies a page on write:
// each commit's root is a page of its own). With n = 1 it is what a disk
// that failed while it took the last commit leaves: the meta page on the
// disk, a page it names not.
func TearLastCommits(tb testing.TB, path string, n int) {
	tb.Helper()
	metas, _, err := storage.Metas(path)
	if err != nil {
		tb.Fatal(err)
	}
	if metas[0].TxID > metas[1].TxID {
		metas[0], metas[1] = metas[1], metas[0] // the later last
	}
	if metas[0].Root == metas[1].Root {
		tb.Fatalf("the last two commits share their root page %d", metas[0].Root)
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	for _, m := range metas[2-n:] {
		if _, err := f.WriteAt(make([]byte, m.PageSize), int64(m.Root)*int64(m.PageSize)); err != nil {
			tb.Fatal(err)
		}
	}
}
