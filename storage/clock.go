package storage

import (
	"encoding/binary"
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

// keyClock holds the mark: Unix nanoseconds, 8 bytes big-endian.
var keyClock = []byte("clock")

// clockKeep is long the mark may lag the clock before a commit takes a
// newer one.
const clockKeep = time.Second

type clockMark struct {
	atOpen time.Time    // what the file held when opened (zero: none)
	seen   atomic.Int64 // the latest time SeeTime was told, Unix ns
	kept   int64        // the time the file holds (the writer's alone)
}

// ClockMark is the last time the router's clock had reached when this
// file was last written, as Open found it (zero for a file that holds
// none: a new one, or one from a router before this mark).
func (db *DB) ClockMark() time.Time { return db.clock.atOpen }

// SeeTime tells the file that the router's clock has reached t. The
// writer keeps it with the next commit once it is clockKeep past the time
// kept, and Close keeps the last one seen.
func (db *DB) SeeTime(t time.Time) {
	ns := t.UnixNano()
	for {
		old := db.clock.seen.Load()
		if ns <= old || db.clock.seen.CompareAndSwap(old, ns) {
			return
		}
	}
}

// clockToKeep is the time a commit should put in the file: the latest
// seen once it is due (or, with all, once it is newer at all), else 0.
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
	if len(v) != 8 {
		return time.Time{}
	}
	return time.Unix(0, int64(binary.BigEndian.Uint64(v)))
}
