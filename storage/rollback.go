package storage

import (
	"errors"
	"fmt"
	"os"
)

// Rollback is a data file set back to the commit before its last by
// RollBackLastCommit, held until Keep or Undo: a commit a failing disk tore
// (docs/decisions/torn-commit.md).
type Rollback struct {
	Path string
	From uint64 // the transaction the file was at
	To   uint64 // the one it is at now: From - 1

	f     *os.File // locked: shared while a check reads the file
	off   int64    // the meta page written over
	saved []byte   // that page's bytes before
}

// RollBackLastCommit sets the data file at path, which no router has open,
// back to the commit before its last, as bbolt's `surgery
// revert-meta-page` does: bbolt keeps the last two commits' meta pages and
// opens the later; the earlier is copied over it, so the tree, and every
// page, of the commit before is what the file holds. What the last commit
// wrote is lost. It refuses a file whose two meta pages are not both valid
// and one commit apart. The returned Rollback holds a shared lock on the
// file (a check may read it; no router may open it to write) until Keep
// or Undo.
func RollBackLastCommit(path string) (*Rollback, error) {
	if _, err := statDataFile(path); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	rb, err := rollBack(f)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("roll back %s: %w", path, err)
	}
	rb.Path = path
	return rb, nil
}

// rollBack is RollBackLastCommit on the open file f: lock, read the meta
// pages, copy the earlier over the later, sync, and let checks read it.
func rollBack(f *os.File) (*Rollback, error) {
	if err := lockFile(f, true); err != nil {
		return nil, err
	}
	m0, ok0 := readMeta(f, 0)
	if !ok0 {
		return nil, errors.New("its first meta page is not valid: bbolt opens the other already; nothing to roll back to")
	}
	size := int64(m0.pageSize)
	m1, ok1 := readMeta(f, size)
	if !ok1 {
		return nil, errors.New("its second meta page is not valid: bbolt opens the other already; nothing to roll back to")
	}
	later, earlier, laterOff, earlierOff := m0, m1, int64(0), size
	if m1.txid > m0.txid {
		later, earlier, laterOff, earlierOff = m1, m0, size, 0
	}
	if earlier.txid+1 != later.txid {
		return nil, fmt.Errorf("its meta pages name transactions %d and %d, not one commit apart: no router leaves a file so", earlier.txid, later.txid)
	}
	rb := &Rollback{From: later.txid, To: earlier.txid, f: f, off: laterOff, saved: make([]byte, size)}
	page := make([]byte, size)
	if _, err := f.ReadAt(rb.saved, laterOff); err != nil {
		return nil, err
	}
	if _, err := f.ReadAt(page, earlierOff); err != nil {
		return nil, err
	}
	copy(page[:8], rb.saved[:8]) // the page header's id: the page it is written to
	if err := rb.write(page); err != nil {
		return nil, err
	}
	return rb, lockFile(f, false)
}

// write puts page at the meta page written over, and syncs it.
func (rb *Rollback) write(page []byte) error {
	if _, err := rb.f.WriteAt(page, rb.off); err != nil {
		return err
	}
	return rb.f.Sync()
}

// Keep ends the rollback: the file stays at commit To.
func (rb *Rollback) Keep() error { return rb.f.Close() }

// Undo puts the last commit's meta page back, byte for byte: the file is
// as it was before RollBackLastCommit.
func (rb *Rollback) Undo() error {
	err := lockFile(rb.f, true)
	if err == nil {
		err = rb.write(rb.saved)
	}
	if cerr := rb.f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("put %s's last commit back: %w", rb.Path, err)
	}
	return nil
}
