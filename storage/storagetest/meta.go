package storagetest

import (
	"encoding/binary"
	"fmt"
	"os"
	"testing"
)

// Meta is what one of a data file's two bbolt meta pages says. bbolt's
// layout (go.etcd.io/bbolt/internal/common/meta.go): a 16-byte page
// header, then magic, version, page size, flags, the root bucket's page
// and sequence, the free list's page, the high-water page, the
// transaction id, the checksum; little-endian.
type Meta struct {
	Magic, PageSize           uint32
	Root, FreeList, HighWater uint64
	TxID                      uint64
}

func (m Meta) String() string {
	return fmt.Sprintf("txid %d, root page %d, free list page %d, high water page %d, magic %#x", m.TxID, m.Root, m.FreeList, m.HighWater, m.Magic)
}

// Metas reads the two meta pages of the data file at path, and its size.
// It does not check them: a test that failed on the file says what it
// held.
func Metas(path string) (metas [2]Meta, size int64, err error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return metas, 0, err
	}
	page := 4096
	if len(b) >= 28 {
		page = int(binary.LittleEndian.Uint32(b[24:28]))
	}
	for i := range metas {
		m := b[min(len(b), i*page):]
		if len(m) < 80 || page < 80 {
			return metas, int64(len(b)), fmt.Errorf("%d bytes: no meta page %d", len(b), i)
		}
		le := binary.LittleEndian
		metas[i] = Meta{Magic: le.Uint32(m[16:20]), PageSize: le.Uint32(m[24:28]), Root: le.Uint64(m[32:40]),
			FreeList: le.Uint64(m[48:56]), HighWater: le.Uint64(m[56:64]), TxID: le.Uint64(m[64:72])}
	}
	return metas, int64(len(b)), nil
}

// TearLastCommits zeroes the root pages that only the last n (1 or 2)
// commits of the data file at path wrote (bbolt copies a page on write:
// each commit's root is a page of its own). With n = 1 it is what a disk
// that failed while it took the last commit leaves: the meta page on the
// disk, a page it names not.
func TearLastCommits(tb testing.TB, path string, n int) {
	tb.Helper()
	metas, _, err := Metas(path)
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
