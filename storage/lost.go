package storage

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"runtime"
	"runtime/debug"
	"strings"
	"time"

	bolt "go.etcd.io/bbolt"
)

// ErrFileLost is the error every write gets once the data file at the
// configured path is no longer the one this router has open, or was cut
// short under it.
var ErrFileLost = errors.New("the data file was removed, replaced or cut short while the router ran")

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
// the next call. A file cut short in place is checkShrunk's.
func (db *DB) checkPlace() {
	if db.lost.Load() != nil || db.opened == nil {
		return
	}
	fi, err := os.Stat(db.path)
	switch {
	case err == nil && os.SameFile(fi, db.opened):
		db.checkShrunk(fi.Size())
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
	err = db.view(func(tx *bolt.Tx) error {
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

// checkShrunk notices the open file cut short in place (truncate, a
// log rotation's copytruncate, `> router.db`): bbolt only ever grows it,
// so a size below the largest seen means pages it maps are gone. (The
// function checkSize refuses such a file at the next start.)
func (db *DB) checkShrunk(size int64) {
	for {
		seen := db.seen.Load()
		if size >= seen {
			if db.seen.CompareAndSwap(seen, size) {
				return
			}
			continue
		}
		db.unreadable(fmt.Sprintf("it was cut from %d to %d bytes", seen, size))
		return
	}
}

// unreadable gives up the open file's mapping: the file was cut short
// under the router (or a read of it faulted). What it held past the cut is
// gone, so nothing is copied out; every read and write is refused from
// then on, and nothing touches the mapping again: a read of a page past
// the end would end the process (SIGBUS), and bbolt keeps the locks a
// fault interrupted. The next start refuses the file when the cut took
// pages in use (checkSize, errEmpty), rather than begin again without
// what it held; a cut of only the room bbolt grew the file by loses
// nothing, and the next start takes the file as it is.
func (db *DB) unreadable(why string) {
	err := fmt.Errorf("%w: %s; nothing more is stored: restart the router (it refuses the file if the cut took what it held: then restore it from a backup, router backup)", ErrFileLost, why)
	db.lost.Store(&err)
	db.unmapped.Store(true)
}

// faulted, deferred by view and update, turns a panic bbolt raises while
// a transaction reads the file's mapping into *err, and gives the mapping
// up: a memory fault (the file cut short in place before checkShrunk saw
// it: a page past the end) or one of bbolt's assertions (a page of zeros
// where the cut file grew again). The goroutine of the transaction is
// guarded so (view and update set SetPanicOnFault); a fault on one of
// bbolt's own still ends the process, and the next start refuses the file.
// A panic of the router's own code is no news of the file, and goes on.
func (db *DB) faulted(err *error) {
	r := recover()
	if r == nil {
		return
	}
	if !db.boltPanic(r) {
		panic(r)
	}
	db.fault.Store(true)
	db.unreadable(fmt.Sprintf("reading it failed (%v): it was cut short, or damaged", r))
	*err = *db.lost.Load()
}

// boltPanic says whether r, the panic being recovered (called from the
// deferred function), is news of the file: a memory fault at an address
// inside bbolt's mapping of it, or a panic raised inside bbolt itself (the
// first frame below the runtime's is bbolt's: its assertions on a page).
// A fault elsewhere (a nil pointer) is a bug, wherever it is met.
func (db *DB) boltPanic(r any) bool {
	if re, ok := r.(interface{ Addr() uintptr }); ok {
		// bbolt maps at least InitialMmapSize (Open: 1 GiB), and past that
		// in steps of 1 GiB above the file's size.
		start := db.mapStart.Load()
		return re.Addr() >= start && re.Addr()-start < uintptr(db.seen.Load())+2<<30
	}
	// An assertion of bbolt's is news of the file only when the file is
	// shorter than it was (cut, then grown again by a commit's writes:
	// pages of zeros); otherwise it is bbolt misused, a bug of the
	// router's, which goes on as a panic rather than pass for a damaged
	// file (a review).
	if fi, err := os.Stat(db.path); err != nil || fi.Size() >= db.seen.Load() {
		return false
	}
	pc := make([]uintptr, 64)
	frames := runtime.CallersFrames(pc[:runtime.Callers(4, pc)])
	for {
		f, more := frames.Next()
		if !strings.HasPrefix(f.Function, "runtime.") {
			return strings.HasPrefix(f.Function, "go.etcd.io/bbolt")
		}
		if !more {
			return false
		}
	}
}

// view runs fn in a bbolt read transaction, guarded (faulted); with the
// mapping given up, it is ErrFileLost at once.
func (db *DB) view(fn func(*bolt.Tx) error) (err error) {
	if db.unmapped.Load() {
		return *db.lost.Load()
	}
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer db.faulted(&err)
	defer db.readers.leave(db.readers.enter())
	return db.bolt.View(fn)
}

// update runs fn in a bbolt write transaction and commits it, guarded as
// view is. It is bbolt's Update without its rollback on a panic: after a
// fault that rollback walks every page again on a goroutine of bbolt's
// own, where the next fault would end the process. A transaction a fault
// ended is left as it is; the mapping is given up with it.
func (db *DB) update(fn func(*bolt.Tx) error) (err error) {
	if db.unmapped.Load() {
		return *db.lost.Load()
	}
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer db.faulted(&err)
	tx, err := db.bolt.Begin(true)
	if err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		tx.Rollback()
		return err
	}
	id := tx.ID()
	if err := tx.Commit(); err != nil {
		if db.applied(id) {
			return &unsyncedError{err}
		}
		return err
	}
	return nil
}

// unsyncedError is a commit's error that came after bbolt wrote its meta
// page, from the sync after it: the commit is applied all the same (bbolt
// reads its meta pages from the file, and its next transaction starts from
// this one), and durable once a later commit's sync succeeds (DB.confirm).
// docs/decisions/disk-full.md, "A sync refused after the meta page".
type unsyncedError struct{ err error }

func (e *unsyncedError) Error() string { return e.err.Error() }
func (e *unsyncedError) Unwrap() error { return e.err }

// applied reports whether the write transaction id is the file's latest:
// whether a commit that failed had written its meta page.
func (db *DB) applied(id int) (yes bool) {
	db.view(func(tx *bolt.Tx) error { yes = tx.ID() >= id; return nil })
	return yes
}

// ErrUnconfirmed is a commit's error when the disk took its pages and its
// meta page but refused the sync after them, and refused the next commit's
// too: the writes are applied (what follows starts from them), and durable
// only once a later commit's sync succeeds.
var ErrUnconfirmed = errors.New("the disk did not confirm the write (its sync failed): it may be stored")
