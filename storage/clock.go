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

// keyClock holds the mark: its time and how far it was ahead of the
// system clock, Unix nanoseconds and nanoseconds, 8 bytes big-endian each.
var keyClock = []byte("clock")

// clockKeep is how long the mark may lag the clock before a commit takes a
// newer one.
const clockKeep = time.Second

// ClockMark is a time the router's clock gave, and how far it was then
// ahead of the system clock (0 but after a step of it backwards).
type ClockMark struct {
	At    time.Time
	Ahead time.Duration
}

type clockMark struct {
	atOpen    ClockMark    // what the file held when opened (zero: none)
	seen      atomic.Int64 // the latest time SeeTime was told, Unix ns
	seenAhead atomic.Int64 // and how far ahead it was
	kept      int64        // the time the file holds (the writer's alone)
}

// ClockMark is the latest time the router's clock is known to have given
// on this file: the one it kept when it was last written, as Open found it
// (zero for a file that holds none: a new one, or one from a router
// before this mark), or a later one told since (SeeTime).
func (db *DB) ClockMark() ClockMark {
	if seen := db.clock.seen.Load(); seen > 0 && (db.clock.atOpen.At.IsZero() || seen > db.clock.atOpen.At.UnixNano()) {
		return ClockMark{At: time.Unix(0, seen), Ahead: time.Duration(db.clock.seenAhead.Load())}
	}
	return db.clock.atOpen
}

// SeeTime tells the file that the router's clock has given m.At. The
// writer keeps the latest with the next commit once it is clockKeep past
// the time kept, and Close keeps the last one told.
func (db *DB) SeeTime(m ClockMark) {
	ns := m.At.UnixNano()
	for {
		old := db.clock.seen.Load()
		if ns <= old {
			return
		}
		if db.clock.seen.CompareAndSwap(old, ns) {
			db.clock.seenAhead.Store(int64(m.Ahead))
			return
		}
	}
}

// clockToKeep is the mark a commit should put in the file: the latest
// seen once it is due (or, with all, once it is newer at all); its At is
// zero if none is.
func (db *DB) clockToKeep(all bool) ClockMark {
	seen := db.clock.seen.Load()
	if seen > db.clock.kept && (all || seen-db.clock.kept >= int64(clockKeep)) {
		return ClockMark{At: time.Unix(0, seen), Ahead: time.Duration(db.clock.seenAhead.Load())}
	}
	return ClockMark{}
}

// keepClock puts m (from clockToKeep; a zero At: nothing) in tx's meta
// bucket. The caller notes it as kept once the transaction has committed.
func keepClock(tx *bolt.Tx, m ClockMark) error {
	if m.At.IsZero() {
		return nil
	}
	v := binary.BigEndian.AppendUint64(nil, uint64(m.At.UnixNano()))
	v = binary.BigEndian.AppendUint64(v, uint64(m.Ahead))
	return tx.Bucket(bucketMeta).Put(keyClock, v)
}

// readClockMark is the mark in tx's meta bucket (a zero At: none).
func readClockMark(tx *bolt.Tx) ClockMark {
	v := tx.Bucket(bucketMeta).Get(keyClock)
	if len(v) != 16 {
		return ClockMark{}
	}
	return ClockMark{At: time.Unix(0, int64(binary.BigEndian.Uint64(v))), Ahead: time.Duration(binary.BigEndian.Uint64(v[8:]))}
}

// ReadClock is the mark of the data file at path, which no router has
// open (`router db clock`).
func ReadClock(path string) (ClockMark, error) {
	bdb, err := openBolt(path, readOnly())
	if err != nil {
		return ClockMark{}, err
	}
	defer bdb.Close()
	var m ClockMark
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
			return meta.Delete(keyClock)
		})
	})
	return errors.Join(err, bdb.Close())
}
