package storage

import (
	"bytes"
	"encoding/binary"
	"errors"
	"sort"
	"time"

	bolt "go.etcd.io/bbolt"
)

// The DLQ's buckets. Dead letters are indexed by tx.go's MoveToDLQ in
// dlq/<queue> (moved_at ‖ seq → key); an operator's resolve moves them to a
// second index, kept until dlq { ttl }:
//
//	resolved/<queue>    resolved_at ‖ seq → key                  resolved dead letters
//	resolved_exp        expires ‖ resolved_at ‖ seq ‖ queue → nil  their TTL index
//
// <queue> is the event type, or "inbox:<name>" for an inbox's records
// (Record.QueueName). A position (moved_at ‖ seq, 16 bytes) is unique: the
// seq is the record's QueueSeq, which a retry renews. Why these indexes:
// docs/decisions/dlq-and-operator-access.md.
var (
	bucketResolved    = []byte("resolved")
	bucketResolvedExp = []byte("resolved_exp")
)

// ErrNotDead is returned by the DLQ operations for a record that is not a
// dead letter (pending, delivered) or not in the state the operation needs.
var ErrNotDead = errors.New("storage: not in the DLQ")

// posLen is the length of a DLQ position: time ‖ seq.
const posLen = 16

// DLQEntry is a record in one of the DLQ indexes.
type DLQEntry struct {
	Record *Record
	// At is when the record was moved to the DLQ (State dlq) or resolved
	// (State resolved).
	At time.Time
	// Pos is the record's position in its index (At ‖ seq): the cursor of
	// a listing that ends at this entry.
	Pos []byte
}

// IsDLQPos reports whether pos has the form of a DLQEntry's Pos (8 bytes
// of time, 8 of sequence).
func IsDLQPos(pos []byte) bool { return len(pos) == 16 }

// DLQQuery selects entries of one index, newest first.
type DLQQuery struct {
	Queue  string    // one queue (an event type, "inbox:<name>"); "" = every queue
	State  State     // StateDLQ (the default) or StateResolved
	Since  time.Time // only entries at or after Since; zero = no bound
	Before []byte    // only entries strictly older than this position (a cursor); nil = from the newest
	Limit  int       // at most this many; ≤ 0 = 100
}

func indexOf(s State) ([]byte, error) {
	switch s {
	case "", StateDLQ:
		return bucketDLQ, nil
	case StateResolved:
		return bucketResolved, nil
	}
	return nil, ErrNotDead
}

// DLQ lists the entries q selects, newest first. Entries whose record is
// gone or no longer in the index's state (a stale entry) are skipped.
func (tx *Tx) DLQ(q DLQQuery) ([]DLQEntry, error) {
	index, err := indexOf(q.State)
	if err != nil {
		return nil, err
	}
	if q.Limit <= 0 {
		q.Limit = 100
	}
	ws := tx.dlqWalkers(index, q)
	var since uint64
	if !q.Since.IsZero() {
		since = timeBound(q.Since)
	}
	want := stateOf(index)
	var out []DLQEntry
	for len(out) < q.Limit {
		var top *dlqWalker
		for _, w := range ws {
			if w.k != nil && (top == nil || bytes.Compare(w.k, top.k) > 0) {
				top = w
			}
		}
		if top == nil || len(top.k) < posLen || binary.BigEndian.Uint64(top.k) < since {
			break
		}
		k, v := top.k, top.v
		top.k, top.v = top.c.Prev()
		r, err := tx.recordAt(v)
		if errors.Is(err, ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if r.State != want {
			continue
		}
		out = append(out, DLQEntry{Record: r, At: posTime(k), Pos: bytes.Clone(k)})
	}
	return out, nil
}

// dlqWalker walks one queue's index backwards from a position.
type dlqWalker struct {
	c    *bolt.Cursor
	k, v []byte
}

// dlqWalkers places a walker on each queue q selects in index (one, or
// all), at its last entry before q.Before (or its last): DLQ merges them by
// position.
func (tx *Tx) dlqWalkers(index []byte, q DLQQuery) []*dlqWalker {
	queues := []string{q.Queue}
	if q.Queue == "" {
		queues = tx.subNames(index)
	}
	var ws []*dlqWalker
	for _, name := range queues {
		b, _ := tx.sub(index, name)
		if b == nil {
			continue
		}
		w := &dlqWalker{c: b.Cursor()}
		if q.Before == nil {
			w.k, w.v = w.c.Last()
		} else if k, _ := w.c.Seek(q.Before); k == nil {
			w.k, w.v = w.c.Last()
		} else {
			w.k, w.v = w.c.Prev()
		}
		ws = append(ws, w)
	}
	return ws
}

func stateOf(index []byte) State {
	if bytes.Equal(index, bucketResolved) {
		return StateResolved
	}
	return StateDLQ
}

func posTime(pos []byte) time.Time {
	return time.Unix(0, int64(binary.BigEndian.Uint64(pos))).UTC()
}

// subNames lists the nested buckets of a top-level bucket.
func (tx *Tx) subNames(parent []byte) []string {
	var out []string
	tx.bucket(parent).ForEachBucket(func(k []byte) error {
		out = append(out, string(k))
		return nil
	})
	return out
}

// DLQEntry returns the record stored under key (Record.Key) with its DLQ
// position. A record that is not a dead letter is returned with a nil Pos
// and ErrNotDead; a missing one gives ErrNotFound.
func (tx *Tx) DLQEntry(key string) (*DLQEntry, error) {
	r, err := tx.Record(key)
	if err != nil {
		return nil, err
	}
	return tx.DLQEntryOf(r)
}

// DLQEntryOf is DLQEntry for a record already read in this transaction.
func (tx *Tx) DLQEntryOf(r *Record) (*DLQEntry, error) {
	if r.State != StateDLQ && r.State != StateResolved {
		return &DLQEntry{Record: r}, ErrNotDead
	}
	index, _ := indexOf(r.State)
	b, _ := tx.sub(index, r.QueueName())
	pos := findPos(b, r)
	if pos == nil {
		// The state says DLQ but no index has it: show it anyway (an
		// operator can still retry or delete it).
		return &DLQEntry{Record: r, At: r.UpdatedAt}, nil
	}
	return &DLQEntry{Record: r, At: posTime(pos), Pos: pos}, nil
}

// findPos returns r's position in index bucket b, or nil. The position is
// UpdatedAt ‖ QueueSeq when nothing touched the record since it was
// indexed; otherwise the bucket is searched (rare: a late commit of a batch
// that held the event saved it again).
func findPos(b *bolt.Bucket, r *Record) []byte {
	if b == nil {
		return nil
	}
	key := []byte(r.Key())
	guess := timeKey(r.UpdatedAt, u64(r.QueueSeq))
	if v := b.Get(guess); v != nil && bytes.Equal(v, key) {
		return guess
	}
	seq := u64(r.QueueSeq)
	c := b.Cursor()
	for k, v := c.Last(); k != nil; k, v = c.Prev() {
		if len(k) == posLen && bytes.Equal(k[8:], seq) && bytes.Equal(v, key) {
			return bytes.Clone(k)
		}
	}
	return nil
}

// unindexDead takes a dead or resolved record out of its DLQ index.
func (tx *Tx) unindexDead(r *Record) error {
	if r.State != StateDLQ && r.State != StateResolved {
		return ErrNotDead
	}
	index, _ := indexOf(r.State)
	b, _ := tx.sub(index, r.QueueName())
	if pos := findPos(b, r); pos != nil {
		return b.Delete(pos)
	}
	return nil
}

// RetryDeadLetter puts a dead (or resolved) record back in its queue, due
// now, with its attempts reset. Outputs keep their delivered flags, so
// acknowledged outputs are not sent again. The record gets a new queue
// sequence: a late commit of an earlier claim cannot mistake it for the
// event it held. r must be the record as read in this transaction.
func (tx *Tx) RetryDeadLetter(r *Record, now time.Time, orderByKey bool) error {
	if err := tx.unindexDead(r); err != nil {
		return err
	}
	r.Attempts = 0
	r.LastError = ""
	r.NextAttemptAt = now
	r.UpdatedAt = now
	return tx.makePending(r, orderByKey)
}

// ResolveDeadLetter marks a dead letter resolved: it leaves the DLQ index
// for the resolved one and is removed, with its record, after ttl.
func (tx *Tx) ResolveDeadLetter(r *Record, now time.Time, ttl time.Duration) error {
	if r.State != StateDLQ {
		return ErrNotDead
	}
	if err := tx.unindexDead(r); err != nil {
		return err
	}
	r.State = StateResolved
	r.UpdatedAt = now
	b, err := tx.sub(bucketResolved, r.QueueName())
	if err != nil {
		return err
	}
	pos := timeKey(now, u64(r.QueueSeq))
	if err := b.Put(pos, []byte(r.Key())); err != nil {
		return err
	}
	exp := timeKey(now.Add(ttl), append(bytes.Clone(pos), r.QueueName()...))
	if err := tx.bucket(bucketResolvedExp).Put(exp, nil); err != nil {
		return err
	}
	return tx.putEvent(r)
}

// DeleteDeadLetter removes a dead (or resolved) record for good.
func (tx *Tx) DeleteDeadLetter(r *Record) error {
	if err := tx.unindexDead(r); err != nil {
		return err
	}
	return tx.deleteEvent([]byte(r.Key()))
}

// DeleteExpiredResolved removes up to limit resolved records whose TTL
// ended before now. An index entry whose record was retried or deleted
// since is dropped without touching anything else.
func (tx *Tx) DeleteExpiredResolved(now time.Time, limit int) (int, error) {
	return tx.expire(bucketResolvedExp, now, limit, func(rest []byte) error {
		if len(rest) < posLen {
			return nil
		}
		pos, queue := rest[:posLen], string(rest[posLen:])
		b, _ := tx.sub(bucketResolved, queue)
		if b == nil {
			return nil
		}
		key := b.Get(pos)
		if key == nil {
			return nil
		}
		key = bytes.Clone(key)
		if err := b.Delete(pos); err != nil {
			return err
		}
		r, err := tx.Record(string(key))
		if errors.Is(err, ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		if r.State != StateResolved {
			return nil
		}
		return tx.deleteEvent(key)
	})
}

// DLQCount is one queue's line of the DLQ stats.
type DLQCount struct {
	Queue    string
	Dead     int
	Resolved int
}

// DLQCounts returns the number of dead and resolved records per queue, for
// every queue that has any, in name order.
func (tx *Tx) DLQCounts() []DLQCount {
	counts := make(map[string]*DLQCount)
	get := func(q string) *DLQCount {
		c, ok := counts[q]
		if !ok {
			c = &DLQCount{Queue: q}
			counts[q] = c
		}
		return c
	}
	for _, q := range tx.subNames(bucketDLQ) {
		if b, _ := tx.sub(bucketDLQ, q); b != nil {
			if n := b.Stats().KeyN; n > 0 {
				get(q).Dead = n
			}
		}
	}
	for _, q := range tx.subNames(bucketResolved) {
		if b, _ := tx.sub(bucketResolved, q); b != nil {
			if n := b.Stats().KeyN; n > 0 {
				get(q).Resolved = n
			}
		}
	}
	out := make([]DLQCount, 0, len(counts))
	for _, c := range counts {
		out = append(out, *c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Queue < out[j].Queue })
	return out
}

// StateCounts is how many records the data file holds in each state, read
// from the indexes (cheap enough for every scrape): pending = queued,
// delivered = kept until outbox.ttl (filtered ones too: one TTL index), dlq and resolved = the DLQ indexes.
type StateCounts struct {
	Pending, Delivered, DLQ, Resolved int
}

// CountStates counts the records by state.
func (tx *Tx) CountStates() StateCounts {
	var s StateCounts
	for _, q := range tx.subNames(bucketQueue) {
		if b, _ := tx.sub(bucketQueue, q); b != nil {
			s.Pending += b.Stats().KeyN
		}
	}
	s.Delivered = tx.bucket(bucketDone).Stats().KeyN
	for _, c := range tx.DLQCounts() {
		s.DLQ += c.Dead
		s.Resolved += c.Resolved
	}
	return s
}
