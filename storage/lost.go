package storage

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"time"

	bolt "go.etcd.io/bbolt"
)

// ErrFileLost is the error every write gets once the data file at the
// configured path is no longer the one this router has open.
var ErrFileLost = errors.New("the data file was removed or replaced while the router ran")

// checkPlace notices when the file at db.path is no longer the one open:
// removed (rm), or replaced (a copy renamed over it). What this router
// stores from then on goes to a file the next start would not open, so
// nothing more is taken (Writable and every write fail with ErrFileLost),
// and what was acknowledged is copied out whole, consistent: back to the
// path when it is free, else beside it (path.recovered-<unix time>). The
// router must then be restarted. Space calls it, every quarter second.
func (db *DB) checkPlace() {
	if db.lost.Load() != nil || db.opened == nil {
		return
	}
	fi, err := os.Stat(db.path)
	if err == nil && os.SameFile(fi, db.opened) {
		return
	}
	to := db.path
	if !errors.Is(err, fs.ErrNotExist) {
		to = fmt.Sprintf("%s.recovered-%d", db.path, time.Now().Unix())
	}
	lost := fmt.Errorf("%w: nothing more is stored; what it held is copied to %s (restart the router)", ErrFileLost, to)
	if cerr := db.copyOut(to); cerr != nil {
		lost = fmt.Errorf("%w: nothing more is stored, and copying what it held to %s failed: %v (a backup taken now still reads it: router backup)", ErrFileLost, to, cerr)
	}
	db.lost.Store(&lost)
}

// copyOut writes a consistent copy of the open file to a new file at
// path, fsynced; it never overwrites one.
func (db *DB) copyOut(path string) error {
	tmp := path + ".partial"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	err = db.bolt.View(func(tx *bolt.Tx) error {
		_, err := tx.WriteTo(f)
		return err
	})
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Link(tmp, path) // fails, rather than overwrite, if path was made meanwhile
	}
	os.Remove(tmp)
	return err
}
