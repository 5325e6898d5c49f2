package storage

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	bolt "go.etcd.io/bbolt"
)

// The data file keeps the last time the router's clock reached, so that a
// router started with its wall clock behind it (an edge node without a
// real-time clock booting at 1970 or at its last saved time, a clock put
// back while the router was stopped) goes on from there instead of
// leaving what it stored waiting for the wall clock to catch up
// (engine.steadyClock; docs/architecture.md, "A clock stepped back").
//
// The mark rides on commits that happen anyway: an idle router writes
// nothing for it. It is at most about a second behind the last commit's
// time, which is no later than anything that commit stored.

// keyClock holds the mark: Unix nanoseconds, 8 bytes big-endian (a
// router of 2026-12-06 wrote 16, the first 8 the same).
var keyClock = []byte("clock")

// clockKeep is how long the mark may lag the clock before a commit takes a
// newer one.
const clockKeep = time.Second

type clockMark struct {
	atOpen time.Time    // what the file held when opened (zero: none)
	seen   atomic.Int64 // the latest time SeeTime was told, Unix ns
	kept   int64        // the time the file holds (the writer's alone)
}

// ClockMark is the latest time the router's clock is known to have given
// on this file: the one it kept when it was last written, as Open found it
// (zero for a file that holds none: a new one, or one from a router
// before this mark), or a later one told since (SeeTime).
func (db *DB) ClockMark() time.Time {
	if seen := db.clock.seen.Load(); seen > 0 && (db.clock.atOpen.IsZero() || seen > db.clock.atOpen.UnixNano()) {
		return time.Unix(0, seen)
	}
	return db.clock.atOpen
}

// SeeTime tells the file that the router's clock has given t. The writer
// keeps the latest with the next commit once it is clockKeep past the
// time kept, and Close keeps the last one told.
func (db *DB) SeeTime(t time.Time) {
	ns := t.UnixNano()
	for {
		old := db.clock.seen.Load()
		if ns <= old || db.clock.seen.CompareAndSwap(old, ns) {
			return
		}
	}
}

// clockToKeep is the time a commit should put in the file, Unix ns: the
// latest seen once it is due (or, with all, once it is newer at all),
// else 0.
func (db *DB) clockToKeep(all bool) int64 {
	seen := db.clock.seen.Load()
	if seen > db.clock.kept && (all || seen-db.clock.kept >= int64(clockKeep)) {
		return seen
	}
	return 0
}

// keepClock puts ns (from clockToKeep; 0: nothing) in tx's meta bucket.
// The caller notes it as kept once the transaction has committed.
func keepClock(tx *bolt.Tx, ns int64) error {
	if ns == 0 {
		return nil
	}
	return tx.Bucket(bucketMeta).Put(keyClock, binary.BigEndian.AppendUint64(nil, uint64(ns)))
}

// readClockMark is the mark in tx's meta bucket (zero: none).
func readClockMark(tx *bolt.Tx) time.Time {
	v := tx.Bucket(bucketMeta).Get(keyClock)
	if len(v) < 8 {
		return time.Time{}
	}
	return time.Unix(0, int64(binary.BigEndian.Uint64(v)))
}

// ReadClock is the mark of the data file at path, which no router has
// open (`router db clock`).
func ReadClock(path string) (time.Time, error) {
	bdb, err := openBolt(path, readOnly())
	if err != nil {
		return time.Time{}, err
	}
	defer bdb.Close()
	var m time.Time
	err = faultSafe(func() error {
		return bdb.View(func(tx *bolt.Tx) error {
			if tx.Bucket(bucketMeta) == nil {
				return fmt.Errorf("%s has no meta bucket: not a router's data file", path)
			}
			m = readClockMark(tx)
			return nil
		})
	})
	return m, err
}

// ForgetClock removes the mark from the data file at path, which no router
// has open (`router db clock -forget`): the next router on it starts at
// the system clock's time. For a file whose router once ran with the
// clock set far ahead.
func ForgetClock(path string) error {
	bdb, err := openBolt(path, writable(0))
	if err != nil {
		return err
	}
	err = faultSafe(func() error {
		return bdb.Update(func(tx *bolt.Tx) error {
			meta := tx.Bucket(bucketMeta)
			if meta == nil {
				return fmt.Errorf("%s has no meta bucket: not a router's data file", path)
			}
			if meta.Get(keyRunning) != nil {
				// Not written to before a router has checked it.
				return fmt.Errorf("the last router on %s did not stop cleanly: start a router on it once (it checks the file and does what the stop left undone), stop it, then forget the clock", path)
			}
			return meta.Delete(keyClock)
		})
	})
	return errors.Join(err, bdb.Close())
}
