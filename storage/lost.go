package storage

import (
	"context"
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
// nothing more is taken: Writable and every write fail with ErrFileLost
// from then on. Then, once the commit under way (if any) is done, what was
// acknowledged is copied out whole and consistent, back to the path when
// it is free, else beside it (path.recovered-<unix time>), on a goroutine
// of its own. The router must then be restarted. Space calls it, every
// quarter second. A stat that fails otherwise than "no such file" (a
// folder made unreadable, an NFS hiccup) proves nothing: checked again at
// the next call.
func (db *DB) checkPlace() {
	if db.lost.Load() != nil || db.opened == nil {
		return
	}
	fi, err := os.Stat(db.path)
	switch {
	case err == nil && os.SameFile(fi, db.opened):
		return
	case err != nil && !errors.Is(err, fs.ErrNotExist):
		return
	}
	to := db.path
	if err == nil {
		to = fmt.Sprintf("%s.recovered-%d", db.path, time.Now().Unix())
	}
	lost := fmt.Errorf("%w: nothing more is stored; what it held is being copied to %s (restart the router once it is)", ErrFileLost, to)
	db.lost.Store(&lost)
	// A write through the writer returns once any group it was committing
	// is done: the copy below has every write acknowledged.
	db.Update(context.Background(), func(*Tx) error { return nil })
	go func() {
		done := fmt.Errorf("%w: nothing more is stored; what it held is copied to %s (restart the router)", ErrFileLost, to)
		if err := db.copyOut(to); err != nil {
			done = fmt.Errorf("%w: nothing more is stored, and copying what it held to %s failed: %v (router backup still reads it)", ErrFileLost, to, err)
		}
		db.lost.Store(&done)
	}()
}

// copyOut writes a consistent copy of the open file to a new file at
// path, fsynced; it never overwrites one. Where the copy cannot be put at
// path, it is left at path.partial, and the error says so.
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
	if err != nil {
		os.Remove(tmp)
		return err
	}
	return PlaceNew(tmp, path)
}

// PlaceNew puts the finished file tmp at path, which it never replaces: a
// hard link, then tmp removed. Where the filesystem has no hard links
// (vfat, exFAT, many network mounts), a rename once path is seen free. On
// failure tmp stays, and the error names it.
func PlaceNew(tmp, path string) error {
	err := os.Link(tmp, path)
	if err != nil && !errors.Is(err, fs.ErrExist) {
		if _, serr := os.Lstat(path); errors.Is(serr, fs.ErrNotExist) {
			err = os.Rename(tmp, path)
		}
	}
	if err != nil {
		return fmt.Errorf("%w (the copy is kept at %s)", err, tmp)
	}
	os.Remove(tmp) // linked: path is the copy now
	return nil
}
