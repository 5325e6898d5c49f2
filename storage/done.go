package storage

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"time"
)

// The delivered index (bucketDone) is keyed by expiry: delivery time plus
// the outbox ttl then in force, so that cleanup reads it from the front.
// While the ttl stays the same its newest entries are the newest
// deliveries, which RecentlyDelivered needs after an unclean stop. A ttl
// lowered by a reload or a restart breaks that: the next deliveries sort
// before the last ones under the old ttl, and reading back from the end
// would find those instead (a power cut's loss unchecked). So the file
// remembers which ttls its entries were made with (keyDoneTTLs, written only
// when the ttl changes) and RecentlyDelivered reads back further by the
// spread between them. Each entry holds the record's queue sequence
// (doneSeq): cleanup removes a record only by the entry of its last
// delivery, not by one an earlier delivery of the same key left behind.

// keyDoneTTLs holds the doneTTLs the delivered index may still hold
// entries of (meta bucket, JSON).
var keyDoneTTLs = []byte("done_ttls")

// doneTTL is a ttl the delivered index was written with, until a time
// (zero: still in use).
type doneTTL struct {
	TTL   time.Duration `json:"ttl"`
	Until time.Time     `json:"until,omitzero"`
}

// noteDoneTTL records that entries are being made with ttl, once per
// transaction.
func (tx *Tx) noteDoneTTL(ttl time.Duration, now time.Time) error {
	if tx.doneTTL == ttl {
		return nil
	}
	ttls, err := tx.doneTTLs()
	if err != nil {
		return err
	}
	if n := len(ttls); n == 0 || ttls[n-1].TTL != ttl { // the last is the one in use
		if n > 0 {
			ttls[n-1].Until = now
		}
		ttls = append(live(ttls, now), doneTTL{TTL: ttl})
		v, err := json.Marshal(ttls)
		if err != nil {
			return err
		}
		if err := tx.bucket(bucketMeta).Put(keyDoneTTLs, v); err != nil {
			return err
		}
	}
	tx.doneTTL = ttl
	return nil
}

// doneTTLs is what keyDoneTTLs holds (none in a file from before it).
func (tx *Tx) doneTTLs() ([]doneTTL, error) {
	var ttls []doneTTL
	v := tx.bucket(bucketMeta).Get(keyDoneTTLs)
	if v == nil {
		return nil, nil
	}
	if err := json.Unmarshal(v, &ttls); err != nil {
		return nil, errors.Join(ErrCorrupt, err)
	}
	return ttls, nil
}

// live is the ttls whose entries may still be in the index at now.
func live(ttls []doneTTL, now time.Time) []doneTTL {
	out := ttls[:0]
	for _, t := range ttls {
		if t.Until.IsZero() || t.Until.Add(t.TTL).After(now) {
			out = append(out, t)
		}
	}
	return out
}

// ttlSpread is how far apart the ttls of the index's live entries are.
func (tx *Tx) ttlSpread(now time.Time) (time.Duration, error) {
	ttls, err := tx.doneTTLs()
	if ttls = live(ttls, now); err != nil || len(ttls) == 0 {
		return 0, err
	}
	lo, hi := ttls[0].TTL, ttls[0].TTL
	for _, t := range ttls[1:] {
		lo, hi = min(lo, t.TTL), max(hi, t.TTL)
	}
	return hi - lo, nil
}

// RecentlyDelivered calls fn with each delivered record delivered within
// window of the newest delivery: what was delivered last before the router
// stopped at (or before) now. It reads the index back from its end by the
// window and the spread of the ttls its entries were made with, and picks
// by each record's own delivery time (Record.LastDelivered). The records
// lack their event's data (decodeRecordWithoutData): their outputs are
// what the caller asks. None is gathered here: a crash under load leaves
// hundreds of thousands of events in the window, and the caller keeps only
// what it needs of each (docs/decisions/memory-limit.md). The index is read
// twice, first for the newest delivery.
func (tx *Tx) RecentlyDelivered(window time.Duration, now time.Time, fn func(*Record) error) error {
	from, err := tx.recentFrom(window, now)
	if err != nil || from == 0 {
		return err
	}
	var newest time.Time
	err = tx.eachDeliveredFrom(from, func(r *Record) error {
		if d := r.LastDelivered(); d.After(newest) {
			newest = d
		}
		return nil
	})
	if err != nil {
		return err
	}
	return tx.eachDeliveredFrom(from, func(r *Record) error {
		if !deliveredSince(r, newest.Add(-window)) {
			return nil
		}
		return fn(r)
	})
}

// recentFrom is where RecentlyDelivered reads the delivered index from:
// its last entry less the window and the spread of the ttls (0 when the
// index is empty).
func (tx *Tx) recentFrom(window time.Duration, now time.Time) (uint64, error) {
	last, _ := tx.bucket(bucketDone).Cursor().Last()
	if last == nil {
		return 0, nil
	}
	spread, err := tx.ttlSpread(now)
	if err != nil {
		return 0, err
	}
	end, back := binary.BigEndian.Uint64(last), uint64((window + spread).Nanoseconds())
	if back >= end {
		return 1, nil
	}
	return end - back, nil
}

// eachDeliveredFrom calls fn with each delivered record whose entry in the
// delivered index is at or after from, newest first, each record by the
// entry of its last delivery (doneSeq): an entry an earlier delivery left
// is passed over. An entry from before doneSeq may pass a record twice.
func (tx *Tx) eachDeliveredFrom(from uint64, fn func(*Record) error) error {
	c := tx.bucket(bucketDone).Cursor()
	for k, seq := c.Last(); k != nil && binary.BigEndian.Uint64(k) >= from; k, seq = c.Prev() {
		v := tx.getEvent(k[8:])
		if v == nil {
			continue
		}
		r, err := decodeRecordWithoutData(v)
		if err != nil {
			return err
		}
		if s, n := binary.Uvarint(seq); r.State != StateDelivered || n > 0 && s != r.QueueSeq {
			continue
		}
		if err := fn(r); err != nil {
			return err
		}
	}
	return nil
}

// DeleteDeliveredBefore removes up to limit delivered (and filtered)
// records delivered before cutoff, ahead of their ttl: the storage
// budget's early removal, which must spare what RecentlyDelivered will
// need. The index is keyed by expiry, so it removes the entries expiring
// before cutoff plus the shortest ttl they can have been made with (ttl,
// the one in force, or one the file noted): none of a later delivery lies
// there.
func (tx *Tx) DeleteDeliveredBefore(cutoff time.Time, ttl time.Duration, limit int) (int, error) {
	ttls, err := tx.doneTTLs()
	if err != nil {
		return 0, err
	}
	for _, t := range live(ttls, cutoff) {
		ttl = min(ttl, t.TTL)
	}
	return tx.DeleteExpiredDelivered(cutoff.Add(ttl), limit)
}

// DeliveredRemovableBy reports whether the delivered index holds an entry
// that DeleteDeliveredBefore(at, ttl) removes: a delivered (or filtered)
// record the cleanup can take to make room by then. One seek. Entries made
// under a longer ttl before a reload lowered it sort later, and do not
// count until they come due.
func (tx *Tx) DeliveredRemovableBy(at time.Time, ttl time.Duration) bool {
	k, _ := tx.cursor(tx.bucket(bucketDone)).First()
	if k == nil {
		return false
	}
	ttls, err := tx.doneTTLs()
	if err != nil {
		return true // cannot tell: say there is, as the cleanup will try
	}
	for _, t := range live(ttls, at) {
		ttl = min(ttl, t.TTL)
	}
	return binary.BigEndian.Uint64(k) <= uint64(at.Add(ttl).UnixNano())
}

// The partial index (bucketPartial: record key → nothing) lists the pending
// events and dead letters with an output delivered: events whose other
// outputs failed. The delivered index does not hold them, and their queue
// entries are no guide to when that output went out (an attempt whose
// outcome is unknown leaves its entry where it was), yet a power cut can
// take that output too. Kept by putEvent, which every write of a record goes
// through (a record without outputs, every new event, costs it nothing),
// and deleteEvent, which every removal does.

// keyPartialBuilt marks a file whose partial index has been built from its
// queues and dead letters (meta bucket): a file from before the index gets
// it at its first open.
var keyPartialBuilt = []byte("partial_built")

// buildPartialIndex fills the partial index from every queued event and
// dead letter, once per file.
func (tx *Tx) buildPartialIndex() error {
	meta := tx.bucket(bucketMeta)
	if meta.Get(keyPartialBuilt) != nil {
		return nil
	}
	for _, index := range [][]byte{bucketQueue, bucketDLQ} {
		for _, q := range tx.subNames(index) {
			b, _ := tx.sub(index, q)
			err := b.ForEach(func(_, key []byte) error {
				r, err := tx.Record(string(key))
				if errors.Is(err, ErrNotFound) {
					return nil
				}
				if err != nil {
					return err
				}
				return tx.indexPartial(r, []byte(r.Key()))
			})
			if err != nil {
				return err
			}
		}
	}
	return meta.Put(keyPartialBuilt, []byte("1"))
}

// indexPartial puts r, stored under k, in the partial index or takes it
// out.
func (tx *Tx) indexPartial(r *Record, k []byte) error {
	if len(r.Outputs) == 0 {
		return nil // never partly delivered
	}
	if (r.State == StatePending || r.State == StateDLQ) && deliveredSince(r, time.Time{}) {
		return tx.bucket(bucketPartial).Put(k, nil)
	}
	return tx.del(tx.bucket(bucketPartial), k)
}

// PartlyDelivered calls fn with each pending event and dead letter with an
// output delivered at or after since (each of them for a zero since),
// without their event's data, as RecentlyDelivered does.
func (tx *Tx) PartlyDelivered(since time.Time, fn func(*Record) error) error {
	c := tx.bucket(bucketPartial).Cursor()
	for k, _ := c.First(); k != nil; k, _ = c.Next() {
		v := tx.getEvent(k)
		if v == nil {
			continue
		}
		r, err := decodeRecordWithoutData(v)
		if err != nil {
			return err
		}
		if (r.State == StatePending || r.State == StateDLQ) && deliveredSince(r, since) {
			if err := fn(r); err != nil {
				return err
			}
		}
	}
	return nil
}

// deliveredSince says whether an output of r was delivered at or after t
// (at all, for a zero t).
func deliveredSince(r *Record, t time.Time) bool {
	last := r.LastDelivered()
	return !last.IsZero() && !last.Before(t)
}
