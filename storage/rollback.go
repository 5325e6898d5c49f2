package storage

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// Rollback is a data file set back to the commit before its last by
// RollBackLastCommit, held until Keep or Undo: a commit a failing disk tore
// (docs/decisions/torn-commit.md).
type Rollback struct {
	Path string
	From uint64 // the transaction the file was at
	To   uint64 // the one it is at now: From - 1

	f    *os.File // locked: shared while a check reads the file
	page metaPage
}

// metaPage is the meta page a rollback writes over, kept in the file
// RollbackFile names until the rollback is kept or undone, so that one a
// stop cut short (a Ctrl-C, a lost SSH session, a power cut) can be put
// back (ResumeRollback).
type metaPage struct {
	Off     int64  `json:"offset"`
	Saved   []byte `json:"saved"`   // its bytes before
	Written []byte `json:"written"` // what the rollback wrote there
}

// RollbackFile is where a rollback of the data file at path keeps the
// meta page it wrote over.
func RollbackFile(path string) string { return path + ".rollback" }

// RollBackLastCommit sets the data file at path, which no router has open,
// back to the commit before its last, as bbolt's `surgery
// revert-meta-page` does: bbolt keeps the last two commits' meta pages and
// opens the later; the earlier is copied over it, so the tree, and every
// page, of the commit before is what the file holds. What the last commit
// wrote is lost. It refuses a file whose two meta pages are not both valid
// and one commit apart. The page written over is kept first in
// RollbackFile(path), synced. The returned Rollback holds a shared lock on
// the file (a check may read it; no router may open it to write) until
// Keep or Undo.
func RollBackLastCommit(path string) (*Rollback, error) {
	if _, err := statDataFile(path); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	rb := &Rollback{Path: path, f: f}
	if err := rb.start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("roll back %s: %w", path, err)
	}
	return rb, nil
}

// start locks the file, reads its meta pages, keeps the later in the
// rollback file, copies the earlier over it, and lets checks read it. A
// failure once the page is being written puts it back.
func (rb *Rollback) start() error {
	if err := lockFile(rb.f, true); err != nil {
		return err
	}
	if _, err := os.Stat(RollbackFile(rb.Path)); err == nil {
		return fmt.Errorf("%s is there: a rollback was cut short; router db rollback puts it back first", RollbackFile(rb.Path))
	}
	page, err := rb.revert()
	if err != nil {
		return err
	}
	rb.page = page
	if err := writeSynced(RollbackFile(rb.Path), page); err != nil {
		return fmt.Errorf("keep the meta page it writes over: %w", err)
	}
	if err := rb.write(page.Written); err != nil {
		return rb.putBack(err)
	}
	if err := lockFile(rb.f, false); err != nil {
		return rb.putBack(err)
	}
	return nil
}

// revert reads the two meta pages and says what rolling back writes: the
// earlier's bytes over the later's, with the later's page id.
func (rb *Rollback) revert() (metaPage, error) {
	m0, ok0 := readMeta(rb.f, 0)
	if !ok0 {
		return metaPage{}, errors.New("its first meta page is not valid: bbolt opens the other already; nothing to roll back to")
	}
	size := int64(m0.PageSize)
	m1, ok1 := readMeta(rb.f, size)
	if !ok1 {
		return metaPage{}, errors.New("its second meta page is not valid: bbolt opens the other already; nothing to roll back to")
	}
	later, earlier, laterOff, earlierOff := m0, m1, int64(0), size
	if m1.TxID > m0.TxID {
		later, earlier, laterOff, earlierOff = m1, m0, size, 0
	}
	if earlier.TxID+1 != later.TxID {
		return metaPage{}, fmt.Errorf("its meta pages name transactions %d and %d, not one commit apart: no router leaves a file so", earlier.TxID, later.TxID)
	}
	rb.From, rb.To = later.TxID, earlier.TxID
	p := metaPage{Off: laterOff, Saved: make([]byte, size), Written: make([]byte, size)}
	if _, err := rb.f.ReadAt(p.Saved, laterOff); err != nil {
		return p, err
	}
	if _, err := rb.f.ReadAt(p.Written, earlierOff); err != nil {
		return p, err
	}
	copy(p.Written[:8], p.Saved[:8]) // the page header's id: the page it is written to
	return p, nil
}

// write puts b at the meta page written over, and syncs it.
func (rb *Rollback) write(b []byte) error {
	if _, err := rb.f.WriteAt(b, rb.page.Off); err != nil {
		return err
	}
	return rb.f.Sync()
}

// putBack writes the saved meta page back after err; the rollback file
// goes once it is.
func (rb *Rollback) putBack(err error) error {
	if perr := rb.write(rb.page.Saved); perr != nil {
		return fmt.Errorf("%w; and putting its meta page back failed too (%w): it is kept in %s, which router db rollback puts back", err, perr, RollbackFile(rb.Path))
	}
	os.Remove(RollbackFile(rb.Path))
	return fmt.Errorf("%w; its meta page was put back", err)
}

// Keep ends the rollback: the file stays at commit To.
func (rb *Rollback) Keep() error {
	err := os.Remove(RollbackFile(rb.Path))
	if err == nil {
		err = SyncDir(filepath.Dir(rb.Path))
	}
	if cerr := rb.f.Close(); err == nil {
		err = cerr
	}
	return err
}

// Undo puts the last commit's meta page back, byte for byte: the file is
// as it was before RollBackLastCommit. It needs no lock but the shared one
// held: what it writes is what the file held before.
func (rb *Rollback) Undo() error {
	err := rb.write(rb.page.Saved)
	if err == nil {
		err = os.Remove(RollbackFile(rb.Path))
	}
	if cerr := rb.f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("put %s's last commit back: %w (its meta page is kept in %s, which router db rollback puts back)", rb.Path, err, RollbackFile(rb.Path))
	}
	return nil
}

// ResumeRollback finishes what a rollback of the data file at path that
// was cut short left (its RollbackFile): while the meta page holds what
// that rollback wrote, the saved page is put back; a rollback file the
// data file has moved on from (a router opened the rolled-back file and
// committed) is only removed. It says what it did ("" when there was no
// rollback file).
func ResumeRollback(path string) (string, error) {
	side := RollbackFile(path)
	b, err := os.ReadFile(side)
	if errors.Is(err, os.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	var p metaPage
	if err := json.Unmarshal(b, &p); err != nil || len(p.Saved) != len(p.Written) || len(p.Saved) == 0 {
		// A rollback writes the data file only once this file is whole
		// and synced: cut short while writing it, it changed nothing.
		return "", fmt.Errorf("%s is not a whole rollback's page (%v): the rollback that wrote it was cut short before it changed the data file; remove it", side, err)
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return "", err
	}
	defer f.Close()
	if err := lockFile(f, true); err != nil {
		return "", err
	}
	now := make([]byte, len(p.Written))
	if _, err := f.ReadAt(now, p.Off); err != nil {
		return "", err
	}
	what := "a rollback cut short was put back: the file is as it was before it"
	if bytes.Equal(now, p.Written) {
		rb := &Rollback{Path: path, f: f, page: p}
		if err := rb.write(p.Saved); err != nil {
			return "", fmt.Errorf("put back the meta page a rollback cut short wrote over: %w", err)
		}
	} else {
		what = "a rollback cut short had been kept, and the file written since: its page was left out"
	}
	if err := os.Remove(side); err != nil {
		return "", err
	}
	return what, SyncDir(filepath.Dir(path))
}

// writeSynced writes p to path as JSON, synced with its folder.
func writeSynced(path string, p metaPage) error {
	b, err := json.Marshal(p)
	if err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if err = errors.Join(err, f.Sync(), f.Close()); err != nil {
		os.Remove(path)
		return err
	}
	return SyncDir(filepath.Dir(path))
}
