package storage

import (
	"bytes"
	"errors"

	bolt "go.etcd.io/bbolt"
)

// Unlined is a pending event that is not in its key's line: it was stored
// while its queue was not ordered by key (ordering = "key" came later, by
// a reload or a restart). MissingLines finds them, AddLines lines them up.
type Unlined struct {
	key  string // the event's key (Record.Key)
	line string // orderLine
	seq  uint64 // its queue sequence when it was found
}

// MissingLines lists up to limit pending events of queue t, in due order
// from the queue key from on (nil: the start), that have a partition key
// and no entry in their line; next is the queue key to go on from, nil at
// the queue's end. A read transaction does: the queue may be long,
// and writers go on meanwhile.
func (tx *Tx) MissingLines(t string, from []byte, limit int) (found []Unlined, next []byte, err error) {
	q, _ := tx.sub(bucketQueue, t)
	if q == nil {
		return nil, nil, nil
	}
	keys, _ := tx.sub(bucketKeys, t)
	c := q.Cursor()
	k, v := c.First()
	if from != nil {
		k, v = c.Seek(from)
	}
	for ; k != nil; k, v = c.Next() {
		if len(found) == limit {
			return found, bytes.Clone(k), nil
		}
		r, err := tx.recordAt(v)
		if err != nil {
			return nil, nil, err
		}
		line := orderLine(r)
		if line == "" || (keys != nil && keys.Get(lineKey(line, r.QueueSeq)) != nil) {
			continue
		}
		found = append(found, Unlined{key: r.Key(), line: line, seq: r.QueueSeq})
	}
	return found, nil, nil
}

// AddLines puts each event of queue t that MissingLines found in its
// line, where its queue sequence places it among the others (the order
// they were stored or retried in), if it is still pending under the same
// sequence: an entry for an event no longer there would hold its line for
// ever. It reports how many it put.
func (tx *Tx) AddLines(t string, found []Unlined) (int, error) {
	if len(found) == 0 {
		return 0, nil
	}
	keys, err := tx.sub(bucketKeys, t)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, u := range found {
		r, err := tx.Record(u.key)
		if errors.Is(err, ErrNotFound) {
			continue
		}
		if err != nil {
			return n, err
		}
		if r.State != StatePending || r.QueueSeq != u.seq || r.QueueName() != t {
			continue
		}
		if err := keys.Put(lineKey(u.line, u.seq), []byte(u.key)); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

// A queue's mark in the meta bucket (lines/<queue>) says whether every
// pending event of it with a partition key is in its key's line, so that
// a router started, or reloaded, with ordering = "key" reads the whole
// queue (MissingLines) only when that may not be so: absent, nothing is
// known (a queue of an older file, or one written without its lines);
// lining, a line-up has begun and no event was stored outside its line
// since; lined, every one is in its line. Storing an event outside its
// line removes the mark (makePending, unline), in the same transaction.
//
// A router before this mark stores events outside their lines without
// removing it, so a mark is kept only in a file as this version left it:
// a clean close writes meta's sequence (which every stored event moves)
// under lines-at, and an open that finds another forgets every mark
// (forgetLinesIfMoved). After an unclean stop, or a run of an older
// router, each queue ordered by key is read once more.
var (
	keyLinesAt  = []byte("lines-at")
	linesPrefix = []byte("lines/")
	lining      = []byte("lining")
	lined       = []byte("lined")
)

// linesMark is queue t's mark's key, in the transaction's scratch buffer
// (keyAt's rules: Get, Put and Delete keep no reference to it): unline
// builds it on the ingest path.
func (tx *Tx) linesMark(t string) []byte { return append(append(tx.scratch(), linesPrefix...), t...) }

// LinedUp reports whether every pending event of queue t with a partition
// key is known to be in its key's line.
func (tx *Tx) LinedUp(t string) bool {
	return bytes.Equal(tx.bucket(bucketMeta).Get(tx.linesMark(t)), lined)
}

// BeginLining marks queue t as being lined up: EndLining then marks it
// lined unless an event was stored outside its line in between.
func (tx *Tx) BeginLining(t string) error {
	if tx.unmarked == t {
		tx.unmarked = "" // the next event stored outside its line removes the mark again
	}
	return tx.bucket(bucketMeta).Put(tx.linesMark(t), lining)
}

// EndLining marks queue t lined if no event was stored outside its line
// since BeginLining, and reports whether it did.
func (tx *Tx) EndLining(t string) (bool, error) {
	meta := tx.bucket(bucketMeta)
	if !bytes.Equal(meta.Get(tx.linesMark(t)), lining) {
		return false, nil
	}
	return true, meta.Put(tx.linesMark(t), lined)
}

// unline removes queue t's mark: an event of it was stored outside its
// key's line. Once per queue in a run of one queue's events in a
// transaction, until a BeginLining in it puts the mark back.
func (tx *Tx) unline(t string) error {
	if tx.unmarked == t {
		return nil
	}
	tx.unmarked = t
	return tx.bucket(bucketMeta).Delete(tx.linesMark(t))
}

// stampLines, at a clean close, records meta's sequence for
// forgetLinesIfMoved.
func stampLines(meta *bolt.Bucket) error { return meta.Put(keyLinesAt, u64(meta.Sequence())) }

// forgetLinesIfMoved, at open, removes every queue's lined-up mark unless
// meta's sequence is the one the last clean close recorded (stampLines).
func forgetLinesIfMoved(meta *bolt.Bucket) error {
	if bytes.Equal(meta.Get(keyLinesAt), u64(meta.Sequence())) {
		return nil
	}
	var marks [][]byte
	c := meta.Cursor()
	for k, _ := c.Seek(linesPrefix); k != nil && bytes.HasPrefix(k, linesPrefix); k, _ = c.Next() {
		marks = append(marks, bytes.Clone(k))
	}
	for _, k := range marks {
		if err := meta.Delete(k); err != nil {
			return err
		}
	}
	return nil
}
