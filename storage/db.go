// Package storage is everything bbolt: the buckets, their encoding, the
// transactions, the indexes and the group-commit writer.
//
// One data file holds the outbox (events and their delivery state), the
// per-type queues ordered by next attempt, the DLQ, and the idempotency
// records with their TTL index. Every write goes through DB.Update, which
// joins concurrent writers into one fsynced transaction (group commit): see
// docs/decisions/group-commit.md.
package storage

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/switchyard-router/switchyard/internal/fsperm"
)

// ErrClosed is returned by writes after Close.
var ErrClosed = errors.New("storage: closed")

// maxGroup caps how many queued writes join one transaction, so that one
// commit's latency stays bounded under a flood.
const maxGroup = 2048

// delayedGroup is the group size below which a commit waits CommitDelay
// for more writes. A router at full load commits 20 or more writes at a
// time and gains nothing from a wait; at a moderate rate a commit holds a
// few, and each costs two fdatasyncs (docs/decisions/ingest-cost.md).
const delayedGroup = 16

// Options tune a DB. The zero value is fine.
type Options struct {
	// OnCommit, if set, is called after every group commit with the number
	// of writes it carried and how long the commit took (metrics).
	OnCommit func(writes int, took time.Duration)
	// CommitDelay is how long a commit of fewer than delayedGroup writes
	// waits for more to join it (storage { commit_delay }): fewer
	// commits for a longer wait. 0 commits at once.
	CommitDelay time.Duration
	// CheckUnclean, if set, checks the whole file at path before it is
	// opened to write, when the last router on it did not stop cleanly:
	// where a crash of bbolt's own checks cannot end the caller (cmd/router
	// runs it in a child process; inspect says why). Its error fails Open.
	CheckUnclean func(path string) error
}

// DB is an open data file.
type DB struct {
	bolt *bolt.DB
	path string
	opts Options

	writes chan *write
	mu     sync.RWMutex // guards closed against sends on writes
	closed bool
	done   chan struct{}

	readers readers       // open read transactions (readers.go)
	commits atomic.Uint64 // fsynced transactions
	unclean bool          // the previous run did not stop cleanly
	// freeListErr is why the open could not store the file's free list
	// before bbolt opened it (FreeListError), nil otherwise.
	freeListErr error
	// upgradedFrom is the schema the file had before this open upgraded
	// it; "" when it was new or at SchemaVersion already.
	upgradedFrom string
	// recovered: what the unclean stop called for is done (MarkRecovered).
	recovered atomic.Bool
	// commitErr is the error of the last commit when it failed (a full
	// disk, an I/O error); nil after one succeeds.
	commitErr atomic.Pointer[error]
	// unconfirmed is the error of the last commit applied but not on the
	// disk (ErrUnconfirmed), kept until a commit syncs: a later commit
	// failing otherwise replaces commitErr, not this.
	unconfirmed atomic.Pointer[error]
	// used is the bytes of pages in use after the last commit (Used).
	used atomic.Int64
	// opened is the data file as it was opened; lost is set once the file
	// at path is no longer it (checkPlace).
	opened os.FileInfo
	lost   atomic.Pointer[error]
	// seen is the largest size the open file was seen at (checkShrunk);
	// unmapped is set once its mapping was given up (unreadable); fault
	// once a transaction faulted in it (faulted).
	seen     atomic.Int64
	unmapped atomic.Bool
	fault    atomic.Bool
	// mapStart is the address of bbolt's mapping of the file (boltPanic),
	// read again after each commit: a file grown past the mapping is
	// mapped anew.
	mapStart atomic.Uintptr
	// reserveMu orders the changes to the reserve (reserve.go); released
	// counts the times a full disk made the writer give it up.
	reserveMu sync.Mutex
	released  atomic.Uint64
	// clock is the router's clock as the file keeps it (clock.go).
	clock clockMark
}

type write struct {
	fn  func(*Tx) error
	err chan error
	// later is how long the write may wait for another to share its
	// commit, unless hurry is closed first (Later); 0 commits it at once.
	later later
}

// later is how long a write may wait for company (Later), and what ends
// the wait sooner.
type later struct {
	wait  time.Duration
	hurry <-chan struct{}
}

// hurried reports whether the writer of a write under Later closed its
// hurry channel.
func (l later) hurried() bool {
	select {
	case <-l.hurry:
		return true
	default:
		return false
	}
}

// Later returns a context under which DB.Update may hold its write up to
// wait for another write to share its commit, when no other is queued
// with it, or until hurry is closed. It is for a write that no client
// waits on the disk for: a delivery outcome at a low rate, which would
// otherwise commit alone right after the commit of the events it
// delivered, with two fdatasyncs and much the same pages rewritten (the
// last leaves of the events and queue buckets, the branches above them).
// Sharing the next commit halves the commits per event. The caller closes
// hurry when it learns that no write is coming (what it waits to do next
// was committed already), or that it stops. (docs/decisions/group-commit.md, "A delivery
// outcome waits for company")
func Later(ctx context.Context, wait time.Duration, hurry <-chan struct{}) context.Context {
	return context.WithValue(ctx, laterKey{}, later{wait: wait, hurry: hurry})
}

type laterKey struct{}

// laterOf is what Later set for a write under ctx.
func laterOf(ctx context.Context) later {
	l, _ := ctx.Value(laterKey{}).(later)
	return l
}

// openError names path once: an error of the file system names it already
// ("open PATH: permission denied").
func openError(path string, err error) error {
	if pe, ok := errors.AsType[*fs.PathError](err); ok && pe.Path == path {
		return fmt.Errorf("storage: %w", err)
	}
	return fmt.Errorf("storage: open %s: %w", path, err)
}

// CheckPath says why the router may not keep its data file at path: a
// folder another user owns or anyone may write, or a file there already
// that another user owns, anyone may write, or that is no regular file
// (a device, a folder, a symbolic link). router validate asks it too.
func CheckPath(path string) error {
	if err := fsperm.CheckDir(filepath.Dir(path)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if err := notALink(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if fi, err := os.Stat(path); err == nil {
		if err := notRegular(path, fi); err != nil {
			return err
		}
	}
	return fsperm.CheckFile(path)
}

// Open opens (creating if needed) the data file at path and starts its
// writer goroutine.
func Open(path string, opts Options) (*DB, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return nil, fmt.Errorf("storage: create data directory: %w", err)
	}
	if err := CheckPath(path); err != nil {
		return nil, fmt.Errorf("storage: %w", err)
	}
	if _, err := os.Lstat(path); errors.Is(err, fs.ErrNotExist) {
		if err := createFile(path); err != nil {
			return nil, openError(path, err)
		}
	}
	notStored, err := inspect(path, opts.CheckUnclean)
	if err != nil {
		return nil, openError(path, err)
	}
	bdb, err := openBolt(path, writable(1<<30))
	if err != nil {
		return nil, openError(path, err)
	}
	var unclean bool
	var upgradedFrom string
	if err := faultSafe(func() (err error) {
		unclean, upgradedFrom, err = prepare(bdb)
		return err
	}); err != nil {
		bdb.Close()
		return nil, fmt.Errorf("storage: init %s: %w", path, err)
	}
	// With the file's lock held, no compaction of it is copying: a copy
	// one left when it was stopped only takes the disk's room (up to the
	// file's size).
	os.Remove(compactCopyPath(path))
	opened, _ := os.Stat(path)
	db := &DB{
		opened:       opened,
		freeListErr:  notStored,
		unclean:      unclean,
		upgradedFrom: upgradedFrom,
		bolt:         bdb,
		path:         path,
		opts:         opts,
		writes:       make(chan *write, maxGroup),
		done:         make(chan struct{}),
	}
	if opened != nil {
		db.seen.Store(opened.Size())
	}
	db.mapStart.Store(bdb.Info().Data)
	bdb.View(func(tx *bolt.Tx) error { // prepare made the meta bucket
		if mark := readClockMark(tx); !mark.IsZero() {
			db.clock.atOpen, db.clock.kept = mark, mark.UnixNano()
		}
		return nil
	})
	go db.writer()
	return db, nil
}

// prepare makes an opened file this router's: its buckets, a schema it
// reads (migrated to the current one), the partial index rebuilt, and the
// running mark set. It says whether the mark was already there (a crash,
// SIGKILL or power cut ended the last run), and the schema it upgraded the
// file from ("" for a new file, or one at SchemaVersion already).
func prepare(bdb *bolt.DB) (unclean bool, upgradedFrom string, err error) {
	err = bdb.Update(func(tx *bolt.Tx) error {
		for _, name := range allBuckets {
			if _, err := tx.CreateBucketIfNotExists(name); err != nil {
				return err
			}
		}
		meta := tx.Bucket(bucketMeta)
		if err := unreadableSchema(meta); err != nil {
			return err
		}
		schema := string(meta.Get(keySchema)) // "" for a new file
		if schema != SchemaVersion {
			upgradedFrom = schema
		}
		unclean = meta.Get(keyRunning) != nil
		if err := forgetLinesIfMoved(meta); err != nil {
			return err
		}
		if err := meta.Put(keyRunning, []byte(time.Now().UTC().Format(time.RFC3339Nano))); err != nil {
			return err
		}
		stx := &Tx{tx: tx, writable: true}
		if err := stx.buildPartialIndex(); err != nil {
			return err
		}
		if schema == "1" || schema == "2" {
			if err := stx.migrateOrderLines(); err != nil {
				return err
			}
		}
		return meta.Put(keySchema, []byte(SchemaVersion))
	})
	return unclean, upgradedFrom, err
}

// Path is the data file's path.
func (db *DB) Path() string { return db.path }

// Size is the data file's size in bytes.
func (db *DB) Size() int64 {
	fi, err := os.Stat(db.path)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// Commits is the number of fsynced write transactions so far.
func (db *DB) Commits() uint64 { return db.commits.Load() }

// Close stops the writer after it has committed what is queued, and closes
// the file.
func (db *DB) Close(ctx context.Context) error {
	db.mu.Lock()
	if db.closed {
		db.mu.Unlock()
		return nil
	}
	db.closed = true
	close(db.writes)
	db.mu.Unlock()
	select {
	case <-db.done: // first, alone: with ctx over too, select would pick at random
	default:
		select {
		case <-db.done:
		case <-ctx.Done():
			return fmt.Errorf("storage: close: %w", ctx.Err())
		}
	}
	// The clean stop: the next Open finds no running mark — unless the
	// last run's unclean stop is still to be dealt with (MarkRecovered).
	if db.fault.Load() {
		// bbolt may hold locks the fault interrupted: its Close could wait
		// for ever. The process's end lets the file go.
		return *db.lost.Load()
	}
	var err error
	if db.unmapped.Load() {
		err = *db.lost.Load()
	} else {
		err = db.stopCommit()
	}
	return errors.Join(err, db.bolt.Close())
}

// stopCommit is a clean stop's last commit: the file's lines and clock, and
// the running mark removed (unless the last run's unclean stop is still to
// be dealt with: MarkRecovered). It also stores bbolt's free list, so that
// the next open reads it rather than walking every page of the tree to
// find the free ones (seconds for a large file; minutes where the memory
// cannot cache it); the open's first commit stores none again
// (docs/decisions/page-walk.md, "The free list at a clean stop"). The list
// wants pages side by side, which bbolt may take past the file's end: on a
// full disk (ENOSPC) the commit is made again without it, in the file's
// own free pages, as the writer's commits are (TestACleanStopOnAFullDiskStaysClean).
func (db *DB) stopCommit() error {
	stop := func(tx *bolt.Tx) error {
		meta := tx.Bucket(bucketMeta)
		if err := stampLines(meta); err != nil {
			return err
		}
		if err := keepClock(tx, db.clockToKeep(true)); err != nil {
			return err
		}
		if !db.unclean || db.recovered.Load() {
			return meta.Delete(keyRunning)
		}
		return nil
	}
	db.bolt.NoFreelistSync = false // the writer has stopped: no commit reads it meanwhile
	err := db.update(stop)
	if IsDiskFull(err) {
		db.bolt.NoFreelistSync = true
		err = db.update(stop)
	}
	return err
}

// Unclean reports whether the run before this one did not stop cleanly
// (its running mark was still in the file): a crash, a SIGKILL, a power
// cut. The router then republishes what it delivered last to a broker that
// may have lost it (docs/decisions/power-loss.md).
func (db *DB) Unclean() bool { return db.unclean }

// FreeListError is why Open could not store the free list of a file that
// stored none before bbolt opened it (a *FreeListError: bbolt walked the
// file instead, a slower start); nil when it stored one, or had no need.
func (db *DB) FreeListError() error { return db.freeListErr }

// UpgradedFrom is the schema the file had before this open upgraded it to
// SchemaVersion: routers that read only that one refuse it from now on.
// "" when the file was new or at SchemaVersion already.
func (db *DB) UpgradedFrom() string { return db.upgradedFrom }

// MarkRecovered says that what an unclean stop called for is done (the
// router's republish has committed). Until it is called, Close leaves the
// running mark, so that a run which stops before it (a failed start, a
// SIGTERM during it) leaves the next one Unclean too.
func (db *DB) MarkRecovered() { db.recovered.Store(true) }

// Update runs fn in a write transaction that is fsynced before Update
// returns nil. Concurrent Updates share one transaction (group commit), so
// fn may run more than once: when another write in the group fails, the
// group is rolled back and run again without it. fn must therefore depend
// only on tx, and return its error before it writes where it can.
func (db *DB) Update(ctx context.Context, fn func(*Tx) error) error {
	w := writes.Get().(*write)
	w.fn, w.later = fn, laterOf(ctx)
	defer func() { w.fn = nil; writes.Put(w) }()
	db.mu.RLock()
	if db.closed {
		db.mu.RUnlock()
		return ErrClosed
	}
	db.writes <- w
	db.mu.RUnlock()
	// Once queued, the write will be committed or fail; wait for the verdict
	// even if ctx ends, so that a caller never reports "not stored" for
	// something that then is stored.
	return <-w.err
}

// writes are reused, with their reply channel: the writer sends exactly
// one verdict per queued write and keeps no use of it after, so a write is
// free again once its Update has that verdict (two allocations per
// request fewer).
var writes = sync.Pool{New: func() any { return &write{err: make(chan error, 1)} }}

// View runs fn in a read-only transaction. Values read through Tx are
// copies: they stay valid after View returns.
func (db *DB) View(fn func(*Tx) error) error {
	return db.view(func(btx *bolt.Tx) error { return fn(&Tx{tx: btx}) })
}

// writer drains the queue into one transaction at a time.
func (db *DB) writer() {
	defer close(db.done)
	group := make([]*write, 0, maxGroup)
	delay := time.NewTimer(time.Hour)
	delay.Stop()
	var last lastCommit
	for w := range db.writes {
		group = db.drain(append(group[:0], w))
		if wait, hurry := mayWait(group); wait > 0 {
			group = db.drain(db.gather(group, delay, len(group)+1, wait, hurry))
		}
		if db.opts.CommitDelay > 0 && len(group) < delayedGroup {
			group = db.drain(db.gather(group, delay, delayedGroup, db.opts.CommitDelay, nil))
		} else if want, wait := last.regroup(len(group)); wait > 0 {
			group = db.drain(db.gather(group, delay, want, wait, nil))
		}
		last = db.commit(group)
	}
}

// mayWait is how long a group may wait for another write to join it
// (Later), and what ends the wait sooner: only a lone write under Later
// that is not hurried waits. A group of two or more has its company
// (each write's hurry would need watching, and the first watched alone
// kept a hurried second waiting out its whole wait: a review).
func mayWait(group []*write) (time.Duration, <-chan struct{}) {
	if len(group) != 1 || group[0].later.hurried() {
		return 0, nil
	}
	return group[0].later.wait, group[0].later.hurry
}

// lastCommit is the size and duration of the writer's last commit: the
// writes it committed and its last attempt's time (zero when it failed).
type lastCommit struct {
	writes int
	took   time.Duration
}

// maxRegroupWait bounds regroup's wait (a var for the tests).
var maxRegroupWait = time.Millisecond

// regroup says whether a group of n writes, about to commit, should first
// wait for more, and for how many and how long. Under load the writers a
// large commit answers come back together, a little apart; the first one
// back would otherwise commit alone and make the rest wait for its
// fdatasyncs. So after a commit of delayedGroup writes or more, a group of
// less than half as many waits, up to half that commit's time (at most
// maxRegroupWait), for half as many. A router at a moderate rate commits
// small groups and does not wait; after a burst the first write to come,
// however much later, waits once (docs/decisions/group-commit.md).
func (c lastCommit) regroup(n int) (want int, wait time.Duration) {
	if c.writes < delayedGroup || n >= c.writes/2 {
		return 0, 0
	}
	return c.writes / 2, min(c.took/2, maxRegroupWait)
}

// drain adds the writes queued now to group, up to maxGroup.
func (db *DB) drain(group []*write) []*write {
	for len(group) < maxGroup {
		select {
		case w, ok := <-db.writes:
			if !ok { // closed: Close waits for this last commit
				return group
			}
			group = append(group, w)
		default:
			return group
		}
	}
	return group
}

// gather waits up to wait (on timer) for more writes to join group, until
// it holds want, or until hurry (nil: never).
func (db *DB) gather(group []*write, timer *time.Timer, want int, wait time.Duration, hurry <-chan struct{}) []*write {
	timer.Reset(wait)
	defer timer.Stop() // Go ≥ 1.23: no stale tick to drain
	for len(group) < want {
		select {
		case w, ok := <-db.writes:
			if !ok { // closed: commit what waits, at once
				return group
			}
			group = append(group, w)
		case <-timer.C:
			return group
		case <-hurry:
			return group
		}
	}
	return group
}

// commit runs a group in one transaction. A write whose fn fails is taken
// out and answered with its error; the rest are run again (bbolt has no
// savepoints, so this is how one bad write does not sink its neighbours).
// It returns what it committed.
func (db *DB) commit(group []*write) (done lastCommit) {
	if p := db.lost.Load(); p != nil {
		for _, w := range group {
			w.err <- *p
		}
		return done
	}
	for len(group) > 0 {
		start := time.Now()
		failed := -1
		clock := db.clockToKeep(false)
		err := db.update(func(btx *bolt.Tx) error {
			tx := &Tx{tx: btx, writable: true}
			for i, w := range group {
				if err := w.fn(tx); err != nil {
					failed = i
					return err
				}
			}
			return keepClock(btx, clock)
		})
		if failed >= 0 {
			group[failed].err <- err
			group = append(group[:failed], group[failed+1:]...)
			continue
		}
		_, unsynced := errors.AsType[*unsyncedError](err)
		if unsynced {
			err = db.confirm(err)        // applied: not again
			defer db.readers.waitOlder() // before the next commit allocates
		} else if IsDiskFull(err) && db.releaseReserve() {
			continue // the same group again, in the room the reserve held
		}
		if err != nil {
			err = fmt.Errorf("storage: commit: %w", err)
			db.commitErr.Store(&err)
			if errors.Is(err, ErrUnconfirmed) {
				db.unconfirmed.Store(&err)
			}
		} else {
			db.commitErr.Store(nil)
			db.unconfirmed.Store(nil)
			db.commits.Add(1)
			db.clock.kept = max(db.clock.kept, clock)
			db.mapStart.Store(db.bolt.Info().Data) // the writer remaps, and only in a commit
			if used, err := db.pagesInUse(); err == nil {
				db.used.Store(used)
			}
			done = lastCommit{writes: len(group), took: time.Since(start)}
			if db.opts.OnCommit != nil {
				db.opts.OnCommit(done.writes, done.took)
			}
		}
		for _, w := range group {
			w.err <- err
		}
		return done
	}
	return done
}

// confirm makes durable a commit that was applied though the sync after
// its meta page failed (unsyncedError): one more commit, empty, whose own
// meta page covers it, in the reserve's room if the disk is full. It
// returns nil once that one synced, else ErrUnconfirmed with why: the
// writes may be stored, and will be once a commit syncs.
func (db *DB) confirm(unsynced error) error {
	none := func(*bolt.Tx) error { return nil }
	err := db.update(none)
	if _, ok := errors.AsType[*unsyncedError](err); !ok && IsDiskFull(err) && db.releaseReserve() {
		err = db.update(none)
	}
	if err != nil {
		return fmt.Errorf("%w: %w (and the confirming commit's: %w)", ErrUnconfirmed, unsynced, err)
	}
	return nil
}

// Used is the bytes of pages in use after the last commit, as Space
// counts them, without Space's system calls: one atomic read.
func (db *DB) Used() int64 { return db.used.Load() }

// pagesInUse is the file's high-water mark less its free pages: what
// Space.Used and Used say.
func (db *DB) pagesInUse() (int64, error) {
	var size int64
	if err := db.view(func(tx *bolt.Tx) error { size = tx.Size(); return nil }); err != nil {
		return 0, err
	}
	return size - int64(db.bolt.Stats().FreeAlloc), nil
}

// Writable reports why the data file cannot take writes: a commit applied
// and not yet on the disk (ErrUnconfirmed) until one syncs, else the
// error of the last commit when it failed; nil when it succeeded (or none
// was made).
func (db *DB) Writable() error {
	if p := db.lost.Load(); p != nil {
		return *p
	}
	if p := db.unconfirmed.Load(); p != nil {
		return *p
	}
	if p := db.commitErr.Load(); p != nil {
		return *p
	}
	return nil
}

// Check runs bbolt's consistency check over the whole file of an open
// data file (tests; CheckFile checks one no router has open).
func (db *DB) Check() error {
	return db.view(func(tx *bolt.Tx) error {
		var errs []error
		for err := range tx.Check() {
			errs = append(errs, err)
		}
		return errors.Join(errs...)
	})
}
