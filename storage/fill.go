package storage

import (
	"bytes"

	bolt "go.etcd.io/bbolt"
)

// Fill percents: how full bbolt makes a page when it splits one, by the
// way each bucket's keys arrive (docs/decisions/page-fill.md). bbolt's
// default, 0.5, suits keys that land anywhere; on a bucket whose keys only
// grow it leaves every page half empty for inserts that never come, and
// writes twice the pages per commit.
const (
	// fillAppend: keys that only grow — time-ordered indexes (due queues,
	// expiry indexes, DLQ and audit positions), whose new keys always sort
	// last. Pages are packed full.
	fillAppend = 1.0
	// fillMostlyAppend: keys that mostly grow — the events bucket, keyed
	// by id: UUIDv7 ids the router assigns sort by time, clients' own ids
	// land anywhere. A little room is left for those.
	fillMostlyAppend = 0.9
)

// fillOf is the fill percent of each top-level bucket, and of the buckets
// nested in one (a queue per type); absent = bbolt's default.
var (
	fillOf = map[string]float64{
		string(bucketEvents):      fillMostlyAppend,
		string(bucketDone):        fillAppend,
		string(bucketIdemExp):     fillAppend,
		string(bucketInboxIDs):    fillMostlyAppend,
		string(bucketInboxExp):    fillAppend,
		string(bucketClaimExp):    fillAppend,
		string(bucketResolvedExp): fillAppend,
		string(bucketStateExp):    fillAppend,
	}
	subFillOf = map[string]float64{
		string(bucketQueue):    fillAppend,
		string(bucketDLQ):      fillAppend,
		string(bucketResolved): fillAppend,
		string(bucketAudit):    fillAppend,
	}
)

// fillByKeys turns the fill percents on; the disk benchmarks turn it off to
// measure bbolt's default in the same run.
var fillByKeys = true

// bucket is the top-level bucket name, with its fill percent set when the
// transaction writes.
// The transaction keeps the buckets it opened, looked up by the name's
// backing array (the names are the package's variables): bbolt's lookup
// and the fill percent's were two map lookups a call, several calls an
// event (4% of the router's CPU on batches with client ids).
func (tx *Tx) bucket(name []byte) *bolt.Bucket {
	for _, o := range tx.opened[:tx.nOpened] {
		if &o.name[0] == &name[0] {
			return o.b
		}
	}
	b := tx.tx.Bucket(name)
	if tx.writable && fillByKeys && b != nil {
		if f, ok := fillOf[string(name)]; ok {
			b.FillPercent = f
		}
	}
	if b != nil && tx.nOpened < len(tx.opened) {
		tx.opened[tx.nOpened] = openedBucket{name, b}
		tx.nOpened++
	}
	return b
}

type openedBucket struct {
	name []byte
	b    *bolt.Bucket
}

// get is b.Get through a cursor the transaction keeps for b: bbolt's Get
// makes a cursor, and grows its stack, on every call; Seek on a kept cursor
// reuses them. (Seek starts from the bucket's root, so it sees this
// transaction's own writes, as Get does.) Like Get, it returns nil for a
// nested bucket's key. Why Puts cannot do the same:
// docs/decisions/ingest-cost.md.
func (tx *Tx) get(b *bolt.Bucket, key []byte) []byte {
	k, v := tx.cursor(b).Seek(key)
	if !bytes.Equal(k, key) {
		return nil
	}
	return v
}

// del deletes key from b through a cursor the transaction keeps for b.
// bbolt's Delete makes a new cursor and grows its stack on every call
// (three or four allocations on a tree three levels deep); Seek on a kept
// cursor reuses both (a delivery deletes from its queue and the partial
// index: four allocations fewer per event when it was measured,
// BenchmarkEndToEnd). Seek starts from the bucket's root, so it sees this
// transaction's own writes, as Delete does. A missing key is not an error.
func (tx *Tx) del(b *bolt.Bucket, key []byte) error {
	c := tx.cursor(b)
	if k, _ := c.Seek(key); !bytes.Equal(k, key) {
		return nil
	}
	return c.Delete()
}

// cursor returns the transaction's cursor on b, made on first use.
func (tx *Tx) cursor(b *bolt.Bucket) *bolt.Cursor {
	for _, k := range tx.cursors[:tx.nCursors] {
		if k.b == b {
			return k.c
		}
	}
	c := b.Cursor()
	if tx.nCursors < len(tx.cursors) {
		tx.cursors[tx.nCursors] = keptCursor{b, c}
		tx.nCursors++
	}
	return c
}

type keptCursor struct {
	b *bolt.Bucket
	c *bolt.Cursor
}
