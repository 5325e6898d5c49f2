package storage

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	bolt "go.etcd.io/bbolt"
)

// The schema. Keys that order by time start with a big-endian uint64 of
// Unix nanoseconds, so a cursor walks them oldest first.
//
//	events              key → Record (binary, codec.go); key = id (EventKey), or for an inbox queue ‖ 1 ‖ len(id) ‖ id ‖ source (inboxKey; queue ‖ 0 ‖ id until schema 4)
//	queue/<type>        next_attempt ‖ seq → id       pending events, due order
//	keys/<type>         line ‖ 0x00 ‖ seq → id         pending events per key line (ordering = "key", orderLine)
//	dlq/<type>          moved_at ‖ seq → id           dead letters, newest last
//	done                expires ‖ id → seq (uvarint)  delivered records to clean up (doneSeq; nil in older files)
//	idem                scope → IdemRecord (binary, idempotency.go; JSON before)
//	idem_exp            expires ‖ scope → nil         idempotency records to clean up
//	meta                schema → version; lines/<queue> → lining|lined, lines-at → seq (lines.go)
//	(inbox buckets: inbox.go)
var (
	bucketEvents  = []byte("events")
	bucketQueue   = []byte("queue")
	bucketKeys    = []byte("keys")
	bucketDLQ     = []byte("dlq")
	bucketDone    = []byte("done")
	bucketIdem    = []byte("idem")
	bucketIdemExp = []byte("idem_exp")
	bucketMeta    = []byte("meta")
	bucketPartial = []byte("partial") // done.go
	allBuckets    = [][]byte{bucketEvents, bucketQueue, bucketKeys, bucketDLQ, bucketDone, bucketIdem, bucketIdemExp, bucketMeta, bucketPartial,
		bucketInboxIDs, bucketInboxExp, bucketAudit, bucketClaims, bucketClaimExp, bucketInboxReads, // inbox.go
		bucketResolved, bucketResolvedExp, // dlq.go
		bucketState, bucketStateExp, bucketStateUsage} // state.go

	keySchema  = []byte("schema")
	keyRunning = []byte("running") // present while a router has the file open
	keySeq     = []byte("seq")
	// schemaReadable are the versions this router opens.
	schemaReadable = []string{"1", "2", "3", SchemaVersion}
)

// SchemaVersion is the data file schema this router writes: a file of an
// older one is upgraded when the router opens it, and routers that read
// only the older ones refuse it from then on (DB.UpgradedFrom).
//
// 2: idempotency records are binary (idempotency.go). A
// file at 1 is upgraded when it is opened (its JSON records still read);
// a router that reads only 1 refuses a file at 2 at start, rather than
// failing on each binary record it meets.
//
// 3: the keys index is on order lines per tenant (migrateOrderLines; the
// epoch's time mark, epochMark, came with it). A router that reads
// only up to 2 refuses the file: it would write tenants' entries under
// the bare key, which this version no longer looks at, and never remove
// the entries on lines, which would hold their keys for ever.
//
// 4: an inbox's records and ids index are keyed by the event's source
// and id (inboxKey; records at version 2 of the codec), not its id
// alone. What a file holds in the old form keeps it and still reads
// (idOnlyInboxKey). A router that reads only up to 3 refuses the file:
// it would fail on each version 2 record, and look the new ones up by
// their ids alone, finding none.
const SchemaVersion = "4"

// ReadsSchema says whether this router opens a data file of schema v (""
// for a file no router finished opening).
func ReadsSchema(v string) bool { return v == "" || slices.Contains(schemaReadable, v) }

// unreadableSchema refuses a data file whose schema this router does not
// read (a newer router's): router run, and the offline tools that would
// write it or call it consistent (CheckFile).
func unreadableSchema(meta *bolt.Bucket) error {
	schema := string(meta.Get(keySchema)) // "" for a new file
	if ReadsSchema(schema) {
		return nil
	}
	return fmt.Errorf("data file schema %q, this router reads %q: a newer router wrote it; keep the file, and run that router's version or a later one", schema, schemaReadable)
}

// ErrNotFound is returned when a record does not exist.
var ErrNotFound = errors.New("storage: not found")

// ErrExists is returned by InsertEvent when the id is already stored.
var ErrExists = errors.New("storage: event id already stored")

// Tx is a transaction. Everything it returns is a copy, valid after the
// transaction ends.
type Tx struct {
	tx       *bolt.Tx
	writable bool
	opened   [8]openedBucket
	nOpened  int
	cursors  [8]keptCursor // get's and del's
	nCursors int
	doneTTL  time.Duration // the ttl noteDoneTTL recorded in this transaction
	unmarked string        // the queue whose lined-up mark this transaction removed last (unline)
	// kb holds one key at a time for bbolt calls that keep no reference
	// to it (keyAt): Put copies its key, Get, Seek and Delete keep nothing.
	kb []byte
}

// keyAt starts a key at t in the transaction's scratch buffer, for a key
// the caller completes (append) and hands to a Put, Get or delete at once:
// the next keyAt or keyOf overwrites it. Values are never built here,
// since bbolt keeps a Put's value until the commit. An event's queue, done
// and own keys (keyOf) are built this way wherever they are written, read
// or deleted, and every idempotency record's expiry key; a key longer than
// the buffer is allocated by append.
func (tx *Tx) keyAt(t time.Time) []byte {
	return binary.BigEndian.AppendUint64(tx.scratch(), uint64(t.UnixNano()))
}

// keyOf is s as a key in the scratch buffer (keyAt's rules): an event's
// key to read, store or index it by.
func (tx *Tx) keyOf(s string) []byte { return append(tx.scratch(), s...) }

func (tx *Tx) scratch() []byte {
	if tx.kb == nil {
		tx.kb = make([]byte, 0, 128)
	}
	return tx.kb[:0]
}

// queueKey is r's key in its queue (keyAt's rules).
func (tx *Tx) queueKey(r *Record) []byte {
	return binary.BigEndian.AppendUint64(tx.keyAt(r.NextAttemptAt), r.QueueSeq)
}

// getEvent is the events bucket's Get (Tx.get).
func (tx *Tx) getEvent(key []byte) []byte { return tx.get(tx.bucket(bucketEvents), key) }

func timeKey(t time.Time, rest []byte) []byte {
	k := make([]byte, 8, 8+len(rest))
	binary.BigEndian.PutUint64(k, uint64(t.UnixNano()))
	return append(k, rest...)
}

// timeBound is t as the first 8 bytes of a time key, for the bound of a
// range a client asks for: a time before the Unix epoch sorts below every
// key and one from MaxTime on above every key, where UnixNano's int64
// would wrap (a since of the year 2600 read as 2015 selected everything).
func timeBound(t time.Time) uint64 {
	switch {
	case t.Before(time.Unix(0, 0)):
		return 0
	case !t.Before(MaxTime):
		return math.MaxUint64
	}
	return uint64(t.UnixNano())
}

func u64(v uint64) []byte {
	b := make([]byte, 8)
	binary.BigEndian.PutUint64(b, v)
	return b
}

// orderLine is the line in which r waits behind earlier events of its
// partition key (ordering = "key"): the key itself for the default tenant
// (and an inbox's records), so that a single-tenant data file looks as it
// always did, and 0x01 ‖ tenant ‖ 0x00 ‖ key for the others, so that one
// tenant's failing event never holds back another tenant's events with the
// same key (docs/decisions/tenant-scope.md). CloudEvents strings hold no
// control characters and a tenant no NUL, so no two lines, and no line and
// another's prefix (line ‖ 0x00), are one.
func orderLine(r *Record) string {
	pk := r.Event.PartitionKey()
	if pk == "" || r.Tenant == "" || r.Tenant == DefaultTenant {
		return pk
	}
	return tenantLine(r.Tenant, pk)
}

// tenantLine is the order line of partition key pk for a tenant other
// than the default: 0x01 ‖ tenant ‖ 0x00 ‖ pk.
func tenantLine(tenant, pk string) string { return "\x01" + tenant + "\x00" + pk }

// migrateOrderLines moves the entries that a router before order lines per
// tenant wrote under the bare partition key, for events of tenants other
// than the default, to their tenant's line: once per data file, when this
// version first opens a file of schema 1 or 2 (Open), so that such a
// backlog keeps its order and holds back no other tenant. An entry's
// value is its event's key: "<tenant>/<id>" for those tenants (ids hold
// no '/'), the bare id for the default tenant, "<queue>\x00<id>" for an
// inbox's record.
func (tx *Tx) migrateOrderLines() error {
	type entry struct{ from, to, value []byte }
	for _, q := range tx.subNames(bucketKeys) {
		b, _ := tx.sub(bucketKeys, q)
		var moves []entry
		c := b.Cursor()
		for k, v := c.First(); k != nil; k, v = c.Next() {
			slash := bytes.LastIndexByte(v, '/')
			if len(k) < 9 || k[0] == 1 || slash <= 0 || bytes.IndexByte(v, 0) >= 0 {
				continue // on a line already, or the default tenant's, or an inbox's
			}
			pk, seq := k[:len(k)-9], binary.BigEndian.Uint64(k[len(k)-8:])
			to := lineKey(tenantLine(string(v[:slash]), string(pk)), seq)
			moves = append(moves, entry{bytes.Clone(k), to, bytes.Clone(v)})
		}
		for _, m := range moves {
			if err := b.Delete(m.from); err != nil {
				return err
			}
			if err := b.Put(m.to, m.value); err != nil {
				return err
			}
		}
	}
	return nil
}

// lineKey is the keys index's entry of the event with queue sequence seq
// in line: line ‖ 0 ‖ seq.
func lineKey(line string, seq uint64) []byte {
	return append(linePrefix(line), u64(seq)...)
}

// linePrefix starts the keys of line's entries in the keys bucket: the
// line and a 0 (room for the sequence after it).
func linePrefix(line string) []byte {
	return append(append(make([]byte, 0, len(line)+9), line...), 0)
}

// sub returns the nested bucket name of parent, creating it in a writable tx.
func (tx *Tx) sub(parent []byte, name string) (*bolt.Bucket, error) {
	p := tx.bucket(parent)
	// Bucket is a map lookup once the transaction has opened the child;
	// CreateBucketIfNotExists would seek and copy the name every time.
	b := p.Bucket([]byte(name))
	if !tx.writable {
		return b, nil
	}
	if b == nil {
		var err error
		if b, err = p.CreateBucketIfNotExists([]byte(name)); err != nil {
			return nil, err
		}
	}
	if f, ok := subFillOf[string(parent)]; ok && fillByKeys {
		b.FillPercent = f
	}
	return b, nil
}

func (tx *Tx) nextSeq() (uint64, error) {
	return tx.bucket(bucketMeta).NextSequence()
}

// Record returns the record stored under key (an outbound event's id, see
// Record.Key), or ErrNotFound.
func (tx *Tx) Record(key string) (*Record, error) { return tx.recordAt(tx.keyOf(key)) }

// recordAt is Record for a key held as bytes (a queue entry's value).
func (tx *Tx) recordAt(key []byte) (*Record, error) {
	v := tx.getEvent(key)
	if v == nil {
		return nil, ErrNotFound
	}
	return decodeRecord(v)
}

// InsertEvent stores a new pending event, due at r.NextAttemptAt (CreatedAt
// when zero), and assigns r.QueueSeq. It returns ErrExists, before writing
// anything, when the id is taken.
func (tx *Tx) InsertEvent(r *Record, orderByKey bool) error {
	if tx.getEvent([]byte(r.Key())) != nil {
		return ErrExists
	}
	return tx.InsertNewEvent(r, orderByKey)
}

// InsertNewEvent is InsertEvent for an event whose id the router has just
// made: a UUIDv7 (a millisecond time, a clock sequence, 62 bits from
// crypto/rand), which no stored event can have; or whose key the caller
// has just looked up (an inbox: InboxRecord). It skips the lookup
// InsertEvent starts with, one of the three B+tree descents a stored event
// costs (docs/decisions/ingest-cost.md).
func (tx *Tx) InsertNewEvent(r *Record, orderByKey bool) error {
	if r.NextAttemptAt.IsZero() {
		r.NextAttemptAt = r.CreatedAt
	}
	return tx.makePending(r, orderByKey)
}

// makePending gives r a new queue sequence, stores it as pending and puts
// it in its queue (and, with orderByKey, in its key's line): the one way a
// record enters a queue, new or retried from the DLQ.
func (tx *Tx) makePending(r *Record, orderByKey bool) error {
	seq, err := tx.nextSeq()
	if err != nil {
		return err
	}
	r.QueueSeq = seq
	r.State = StatePending
	if err := tx.putEvent(r); err != nil {
		return err
	}
	if err := tx.enqueue(r); err != nil {
		return err
	}
	line := orderLine(r)
	switch {
	case line == "":
		return nil
	case !orderByKey:
		return tx.unline(r.QueueName())
	}
	keys, err := tx.sub(bucketKeys, r.QueueName())
	if err != nil {
		return err
	}
	return keys.Put(lineKey(line, r.QueueSeq), []byte(r.Key()))
}

func (tx *Tx) putEvent(r *Record) error {
	v, err := encodeRecord(r)
	if err != nil {
		return err
	}
	k := tx.keyOf(r.Key())
	if err := tx.bucket(bucketEvents).Put(k, v); err != nil {
		return err
	}
	return tx.indexPartial(r, k)
}

// deleteEvent removes the record stored under key, and its entry in the
// partial index if it has one: putEvent's counterpart.
func (tx *Tx) deleteEvent(key []byte) error {
	if err := tx.del(tx.bucket(bucketPartial), key); err != nil {
		return err
	}
	return tx.del(tx.bucket(bucketEvents), key)
}

func (tx *Tx) enqueue(r *Record) error {
	q, err := tx.sub(bucketQueue, r.QueueName())
	if err != nil {
		return err
	}
	return q.Put(tx.queueKey(r), []byte(r.Key()))
}

func (tx *Tx) dequeue(r *Record) error {
	if q, _ := tx.sub(bucketQueue, r.QueueName()); q != nil {
		if err := tx.del(q, tx.queueKey(r)); err != nil {
			return err
		}
	}
	if keys, _ := tx.sub(bucketKeys, r.QueueName()); keys != nil {
		if line := orderLine(r); line != "" {
			return tx.del(keys, lineKey(line, r.QueueSeq))
		}
	}
	return nil
}

// Limit bounds what Due takes: at most Events events, and none more once
// those taken hold Bytes (switchyard.Event.Bytes; 0: no bound), the first
// taken whatever its size.
type Limit struct {
	Events int
	Bytes  int64
}

// full reports whether n events holding b bytes reach l.
func (l Limit) full(n int, b int64) bool {
	return n >= l.Events || l.Bytes > 0 && b >= l.Bytes
}

// Reached reports whether recs, as Due took them, reach l: Due stopped at
// l, not for want of due events. It counts their bytes only for a take
// short of l.Events with a byte bound.
func (l Limit) Reached(recs []*Record) bool {
	if len(recs) >= l.Events || l.Bytes <= 0 {
		return len(recs) >= l.Events
	}
	var b int64
	for _, r := range recs {
		b += int64(r.Event.Bytes())
	}
	return l.full(len(recs), b)
}

// Due returns the pending events of type t whose next attempt is at or
// before now, in due order, up to limit, skipping those for which skip
// returns true.
// With ahead, it also takes the events due up to now+ahead that have no
// attempt counted: they wait out an outage, not a retry's backoff, which
// Due never shortens. With orderByKey, an event is skipped while an earlier
// event with the same partition key is still pending.
//
// skip gets the event's key as stored, valid only during the call: a lookup
// with string(key) in a map costs no allocation, and Due calls it for every
// event still in transit ahead of the due ones.
func (tx *Tx) Due(t string, now time.Time, ahead time.Duration, limit Limit, orderByKey bool, skip func(key []byte) bool) ([]*Record, error) {
	q, _ := tx.sub(bucketQueue, t)
	if q == nil {
		return nil, nil
	}
	var keys *bolt.Bucket
	if orderByKey {
		keys, _ = tx.sub(bucketKeys, t)
	}
	end, far := uint64(now.UnixNano()), uint64(now.Add(ahead).UnixNano())
	var out []*Record
	var held int64
	var behind linesBehind
	c := q.Cursor()
	for k, v := c.First(); k != nil && !limit.full(len(out), held); k, v = c.Next() {
		due := binary.BigEndian.Uint64(k)
		if due > far {
			break
		}
		if skip != nil && skip(v) || behind.has(k) {
			continue
		}
		r, err := tx.recordAt(v)
		if err != nil {
			return nil, fmt.Errorf("storage: queue %s points at %s: %w", t, v, err)
		}
		if due > end && r.Attempts > 0 {
			continue // a retry's backoff
		}
		if keys != nil && !firstOfLine(keys, r) {
			behind.add(keys, orderLine(r))
			continue
		}
		out = append(out, r)
		held += int64(r.Event.Bytes())
	}
	return out, nil
}

// linesBehind is, during one Due, the queue sequences of the events behind
// the first of each order line found waiting: Due passes them over by
// their queue key, without reading their records. A backlog of one key
// cost a record read and a seek per event behind its first, per poll
// (39-56 ms a poll at 10,000 events; now ~2 ms: BenchmarkOneKeyBacklogDue,
// docs/decisions/full-batch.md). A line is read linesBehindStep entries
// at a time, from where its last read stopped, when Due meets an event of
// it not read yet: a poll that fills its batch early reads little of a
// long line (all of it was read, 18 times the old cost, for a hot key
// waiting out a backoff among others: a review).
type linesBehind struct {
	seqs map[uint64]struct{}
	next map[string][]byte // per line, the keys-bucket key its next read starts at; nil: read to its end
}

// linesBehindStep is how many entries of a line one read takes (a var:
// TestDueMatchesTheRecordReadingDue reads lines in steps of 2 too).
var linesBehindStep = 256

// add puts in b the next linesBehindStep events of line after its first,
// from the keys bucket (lineKey: the line, 0, the event's queue sequence).
func (b *linesBehind) add(keys *bolt.Bucket, line string) {
	if line == "" {
		return
	}
	if b.seqs == nil {
		b.seqs, b.next = make(map[uint64]struct{}), make(map[string][]byte)
	}
	prefix := linePrefix(line)
	inLine := func(k []byte) bool { return len(k) == len(prefix)+8 && bytes.HasPrefix(k, prefix) }
	c := keys.Cursor()
	var k []byte
	if from, ok := b.next[line]; !ok {
		c.Seek(prefix)
		k, _ = c.Next() // past the line's first
	} else if from != nil {
		k, _ = c.Seek(from)
	}
	for n := 0; n < linesBehindStep && inLine(k); n++ {
		b.seqs[binary.BigEndian.Uint64(k[len(prefix):])] = struct{}{}
		k, _ = c.Next()
	}
	b.next[line] = nil
	if inLine(k) {
		b.next[line] = bytes.Clone(k)
	}
}

// has reports whether the queue entry at key k (due time, queue sequence)
// is behind the first of its line.
func (b *linesBehind) has(k []byte) bool {
	if b.seqs == nil || len(k) != 16 {
		return false
	}
	_, ok := b.seqs[binary.BigEndian.Uint64(k[8:])]
	return ok
}

// FirstDue is when the earliest of type t's pending events is due, and
// false when none is pending. One seek.
func (tx *Tx) FirstDue(t string) (time.Time, bool) { return tx.dueFrom(t, nil) }

// NextDue is when the first of type t's pending events that is due after
// now comes due (a retry's backoff ends, say), and false when none is: a
// loop that waits longer than that takes it late. One seek: the queue is
// in due order.
func (tx *Tx) NextDue(t string, now time.Time) (time.Time, bool) {
	return tx.dueFrom(t, tx.keyAt(now.Add(time.Nanosecond)))
}

// dueFrom is the due time of the first entry of type t's queue at or
// after the key from (nil: the first of all).
func (tx *Tx) dueFrom(t string, from []byte) (time.Time, bool) {
	q, _ := tx.sub(bucketQueue, t)
	if q == nil {
		return time.Time{}, false
	}
	k, _ := q.Cursor().Seek(from)
	if len(k) < 8 {
		return time.Time{}, false
	}
	return time.Unix(0, int64(binary.BigEndian.Uint64(k))), true
}

// firstOfLine reports whether r is the earliest pending event of its
// order line (orderLine).
func firstOfLine(keys *bolt.Bucket, r *Record) bool {
	line := orderLine(r)
	if line == "" {
		return true
	}
	prefix := linePrefix(line)
	k, v := keys.Cursor().Seek(prefix)
	return k == nil || !bytes.HasPrefix(k, prefix) || string(v) == r.Key()
}

// Reschedule moves a pending event to a new due time and saves its state.
// r must be the record as read in this transaction (its queue key is derived
// from the stored NextAttemptAt and QueueSeq).
func (tx *Tx) Reschedule(r *Record, next time.Time) error {
	q, err := tx.sub(bucketQueue, r.QueueName())
	if err != nil {
		return err
	}
	if err := tx.del(q, tx.queueKey(r)); err != nil {
		return err
	}
	r.NextAttemptAt = next
	r.State = StatePending
	if err := q.Put(tx.queueKey(r), []byte(r.Key())); err != nil {
		return err
	}
	return tx.putEvent(r)
}

// MarkDelivered takes a pending event off its queue and keeps it as
// delivered until now+ttl.
func (tx *Tx) MarkDelivered(r *Record, now time.Time, ttl time.Duration) error {
	return tx.markDone(r, StateDelivered, now, ttl)
}

// MarkFiltered takes a pending event off its queue and keeps it as
// filtered (done, nothing sent) until now+ttl.
func (tx *Tx) MarkFiltered(r *Record, now time.Time, ttl time.Duration) error {
	return tx.markDone(r, StateFiltered, now, ttl)
}

func (tx *Tx) markDone(r *Record, state State, now time.Time, ttl time.Duration) error {
	if err := tx.dequeue(r); err != nil {
		return err
	}
	r.State = state
	r.NextAttemptAt = time.Time{}
	r.UpdatedAt = now
	if err := tx.noteDoneTTL(ttl, now); err != nil {
		return err
	}
	if err := tx.bucket(bucketDone).Put(append(tx.keyAt(now.Add(ttl)), r.Key()...), doneSeq(r)); err != nil {
		return err
	}
	return tx.putEvent(r)
}

// doneSeq is the value of r's entry in the delivered index: its queue
// sequence, which names this stay in a queue apart from any other of the
// same key (makePending gives a new one: a redelivery after an unclean
// stop, a retry, an event stored again once deleted), so that an entry
// left by an earlier delivery does not remove the record before its own
// ttl (DeleteExpiredDelivered). Entries written before it have none.
func doneSeq(r *Record) []byte { return binary.AppendUvarint(nil, r.QueueSeq) }

// MoveToDLQ takes a pending event off its queue and parks it in the DLQ.
func (tx *Tx) MoveToDLQ(r *Record, now time.Time, reason string) error {
	if err := tx.dequeue(r); err != nil {
		return err
	}
	r.State = StateDLQ
	r.LastError = reason
	r.NextAttemptAt = time.Time{}
	r.UpdatedAt = now
	dlq, err := tx.sub(bucketDLQ, r.QueueName())
	if err != nil {
		return err
	}
	if err := dlq.Put(timeKey(now, u64(r.QueueSeq)), []byte(r.Key())); err != nil {
		return err
	}
	return tx.putEvent(r)
}

// Save stores r's state without moving it in any index (per-output
// progress of an event that stays where it is).
func (tx *Tx) Save(r *Record) error { return tx.putEvent(r) }

// QueueStats is the depth and age of one type's queue.
type QueueStats struct {
	Pending int
	// OldestPending is when the event due next was stored: in a queue
	// drained in order, its oldest. While it waits out a retry's backoff
	// its due time would say nothing (it lies ahead), its age does; a new
	// event, due at once, comes before it, so this is not the age of the
	// oldest pending event, which only a walk of the queue could find.
	OldestPending time.Time
}

// Queue returns the depth of type t's queue and when the event due next
// was stored (its due time, if its record cannot be read).
func (tx *Tx) Queue(t string) QueueStats {
	q, _ := tx.sub(bucketQueue, t)
	if q == nil {
		return QueueStats{}
	}
	s := QueueStats{Pending: q.Stats().KeyN}
	if k, key := q.Cursor().First(); k != nil {
		s.OldestPending = time.Unix(0, int64(binary.BigEndian.Uint64(k)))
		if r, err := tx.recordAt(key); err == nil && !r.CreatedAt.IsZero() {
			s.OldestPending = r.CreatedAt
		}
	}
	return s
}

// DLQDepth returns how many dead letters type t has.
func (tx *Tx) DLQDepth(t string) int {
	b, _ := tx.sub(bucketDLQ, t)
	if b == nil {
		return 0
	}
	return b.Stats().KeyN
}

// AnyPending reports whether any queue (an event type's, an inbox's)
// holds an event: one seek a queue.
func (tx *Tx) AnyPending() bool {
	queues := tx.bucket(bucketQueue)
	c := queues.Cursor()
	for k, v := c.First(); k != nil; k, v = c.Next() {
		if q := queues.Bucket(k); v == nil && q != nil {
			if first, _ := q.Cursor().First(); first != nil {
				return true
			}
		}
	}
	return false
}

// Types lists the event types that have a queue: every type the file
// ever stored, its events delivered or not.
func (tx *Tx) Types() []string {
	return tx.types(false)
}

// QueuedTypes lists the event types whose queue holds an event (one seek
// a queue).
func (tx *Tx) QueuedTypes() []string {
	return tx.types(true)
}

func (tx *Tx) types(queued bool) []string {
	var out []string
	queues := tx.bucket(bucketQueue)
	queues.ForEachBucket(func(k []byte) error {
		if queued {
			if first, _ := queues.Bucket(k).Cursor().First(); first == nil {
				return nil
			}
		}
		out = append(out, string(k))
		return nil
	})
	return out
}

// DeleteExpiredDelivered removes up to limit delivered records whose TTL
// ended before now. It returns how many index entries it removed: an
// entry of an earlier delivery of a record delivered again since (doneSeq)
// goes without the record.
func (tx *Tx) DeleteExpiredDelivered(now time.Time, limit int) (int, error) {
	return tx.expireEntries(bucketDone, now, limit, func(id, seq []byte) error {
		v := tx.getEvent(id)
		if v == nil {
			return nil
		}
		r, err := decodeRecord(v)
		if err != nil {
			return err
		}
		if r.State != StateDelivered && r.State != StateFiltered { // retried by hand since: keep it
			return nil
		}
		if s, n := binary.Uvarint(seq); n > 0 && s != r.QueueSeq { // delivered again since
			return nil
		}
		return tx.deleteEvent(id)
	})
}

// expire walks a TTL index (expires ‖ rest → nil) and calls del for the
// rest of every entry that expired before now, up to limit entries.
func (tx *Tx) expire(index []byte, now time.Time, limit int, del func(rest []byte) error) (int, error) {
	return tx.expireEntries(index, now, limit, func(rest, _ []byte) error { return del(rest) })
}

// expireEntries is expire for an index whose entries have values: del
// gets each entry's value too.
func (tx *Tx) expireEntries(index []byte, now time.Time, limit int, del func(rest, v []byte) error) (int, error) {
	b := tx.bucket(index)
	end := uint64(now.UnixNano())
	c := b.Cursor()
	n := 0
	for k, v := c.First(); k != nil && n < limit; k, v = c.First() {
		if binary.BigEndian.Uint64(k) > end {
			break
		}
		rest, val := append([]byte(nil), k[8:]...), bytes.Clone(v)
		if err := c.Delete(); err != nil {
			return n, err
		}
		if err := del(rest, val); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

// Forget marks the outputs of r that again picks not delivered, leaving r
// where it is (pending, or a dead letter): its loop, or a retry from the
// DLQ, publishes them once more with their message ids. It reports whether
// any output was picked.
func (tx *Tx) Forget(r *Record, again func(Output) bool, now time.Time) (bool, error) {
	if !undeliver(r, again) {
		return false, nil
	}
	r.UpdatedAt = now
	return true, tx.putEvent(r)
}

// undeliver marks the delivered outputs of r that again picks not
// delivered, and says whether it picked any.
func undeliver(r *Record, again func(Output) bool) bool {
	picked := false
	for i := range r.Outputs {
		if r.Outputs[i].Delivered && again(r.Outputs[i]) {
			r.Outputs[i].Delivered = false
			picked = true
		}
	}
	return picked
}

// Redeliver makes a delivered record pending again with the outputs that
// again picks marked not delivered, so that its type's loop publishes them
// once more with their message ids. It reports whether any output was
// picked.
//
// The record goes back in order: due since its creation, so before the
// events stored after it, and, with orderByKey, ahead of the pending
// events of its key's line stored after it (lineBehind). A power cut loses
// the last deliveries together, and they go out again in the order they
// first did, when the records are redelivered newest first (highest
// QueueSeq first, as engine.requeue sorts them). (A review: due now
// and at the end of its line, they went out newest first, and behind a
// later event of their key still pending.) Its queue sequence is new: it
// names this stay in the queue (doneSeq).
func (tx *Tx) Redeliver(r *Record, again func(Output) bool, orderByKey bool, now time.Time) (bool, error) {
	if !undeliver(r, again) {
		return false, nil
	}
	r.NextAttemptAt = r.CreatedAt
	r.UpdatedAt = now
	was := r.QueueSeq
	if err := tx.makePending(r, orderByKey); err != nil {
		return true, err
	}
	if !orderByKey {
		return true, nil
	}
	return true, tx.lineBehind(r, was)
}

// lineBehind moves behind r, just made pending again at the end of its
// key's line, the pending events of that line stored after r first was
// (a line sequence between was, r's sequence then, and r's new one), in
// their order: each gets a new sequence, as r did.
func (tx *Tx) lineBehind(r *Record, was uint64) error {
	line := orderLine(r)
	keys, _ := tx.sub(bucketKeys, r.QueueName())
	if line == "" || keys == nil {
		return nil
	}
	var behind []string
	prefix, c := append([]byte(line), 0), keys.Cursor()
	for k, v := c.Seek(lineKey(line, was+1)); bytes.HasPrefix(k, prefix); k, v = c.Next() {
		if binary.BigEndian.Uint64(k[len(prefix):]) >= r.QueueSeq {
			break
		}
		behind = append(behind, string(v))
	}
	for _, key := range behind {
		p, err := tx.Record(key)
		if err != nil {
			return err
		}
		if err := tx.dequeue(p); err != nil {
			return err
		}
		if err := tx.makePending(p, true); err != nil {
			return err
		}
	}
	return nil
}
