package storage

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"time"
)

// IdemRecord is what the router remembers of one idempotent request: the
// digest of what was asked and the response that was given, replayed
// byte-identical when the same request comes again.
type IdemRecord struct {
	Digest      []byte    `json:"digest"`
	Status      int       `json:"status"`
	ContentType string    `json:"content_type"`
	Body        []byte    `json:"body"`
	EventIDs    []string  `json:"event_ids"`
	CreatedAt   time.Time `json:"created_at"`
	ExpiresAt   time.Time `json:"expires_at"`
}

// Idempotency returns the record stored under scope, or ErrNotFound (also
// when it has expired but not yet been cleaned up).
func (tx *Tx) Idempotency(scope string, now time.Time) (*IdemRecord, error) {
	r, _, err := tx.LiveIdempotency(scope, now)
	return r, err
}

// LiveIdempotency is Idempotency that also returns, when the record under
// scope has expired, its expiry (zero otherwise): what ReplaceIdempotency
// needs to replace it.
func (tx *Tx) LiveIdempotency(scope string, now time.Time) (r *IdemRecord, oldExpiry time.Time, err error) {
	v := tx.get(tx.bucket(bucketIdem), []byte(scope))
	if v == nil {
		return nil, time.Time{}, ErrNotFound
	}
	if r, err = decodeIdem(v); err != nil {
		return nil, time.Time{}, fmt.Errorf("idempotency record %q: %w", scope, err)
	}
	if !now.Before(r.ExpiresAt) {
		return nil, r.ExpiresAt, ErrNotFound
	}
	return r, time.Time{}, nil
}

// ReplaceIdempotency stores r under scope until r.ExpiresAt. The caller
// read scope in an earlier transaction (LiveIdempotency) and kept every
// other write to it out since (the engine's in-flight scopes); oldExpiry is
// the expiry of the expired record it found then, zero if none. That
// record's entry in the expiry index goes, so that the cleanup does not
// take the new record at the old time; had the cleanup removed both
// meanwhile, the delete is a no-op. Not reading scope again spares the
// serial writer a B+tree descent per event (docs/decisions/ingest-cost.md).
func (tx *Tx) ReplaceIdempotency(scope string, r *IdemRecord, oldExpiry time.Time) error {
	if !oldExpiry.IsZero() {
		if err := tx.bucket(bucketIdemExp).Delete(append(tx.keyAt(oldExpiry), scope...)); err != nil {
			return err
		}
	}
	if err := tx.bucket(bucketIdem).Put([]byte(scope), encodeIdem(r)); err != nil {
		return err
	}
	return tx.bucket(bucketIdemExp).Put(append(tx.keyAt(r.ExpiresAt), scope...), nil)
}

// DeleteExpiredIdempotency removes up to limit idempotency records whose
// window ended before now.
func (tx *Tx) DeleteExpiredIdempotency(now time.Time, limit int) (int, error) {
	return tx.expire(bucketIdemExp, now, limit, func(scope []byte) error {
		return tx.bucket(bucketIdem).Delete(scope)
	})
}

// keyIdemWindow holds the longest window idempotency records were made with
// (meta bucket, 8 bytes of nanoseconds): how far past a time the expiry of
// a record made before it can lie. Written only when a longer window comes
// into force (NoteIdempotencyWindow); absent in a file from before it.
var keyIdemWindow = []byte("idem_window")

// NoteIdempotencyWindow records that records are made with window from now
// on, when it is longer than any before.
func (tx *Tx) NoteIdempotencyWindow(window time.Duration) error {
	if window <= tx.IdempotencyWindow() {
		return nil
	}
	return tx.bucket(bucketMeta).Put(keyIdemWindow, u64(uint64(window)))
}

// IdempotencyWindow is the longest window records were made with, as
// noted; zero when none was.
func (tx *Tx) IdempotencyWindow() time.Duration {
	v := tx.bucket(bucketMeta).Get(keyIdemWindow)
	if len(v) != 8 {
		return 0
	}
	return time.Duration(binary.BigEndian.Uint64(v))
}

// DeleteIdempotencyMadeBefore removes up to limit idempotency records made
// before cutoff, looking at no more than 4×limit entries of the expiry
// index, from the key from (nil: its start) on. A record made since is
// passed over, not a reason to stop: records made under a longer window,
// before a reload or restart shortened it, lie behind newer ones. The walk
// ends where no record made before cutoff can lie: cutoff plus the longest
// window records were made with (or window, if that is longer). next is
// where a further call goes on, nil once the walk has ended.
func (tx *Tx) DeleteIdempotencyMadeBefore(cutoff time.Time, window time.Duration, from []byte, limit int) (n int, next []byte, err error) {
	end := uint64(cutoff.Add(max(window, tx.IdempotencyWindow())).UnixNano())
	records, index := tx.bucket(bucketIdem), tx.bucket(bucketIdemExp)
	c := index.Cursor()
	k, _ := c.Seek(from)
	for looked := 0; k != nil && binary.BigEndian.Uint64(k) < end; looked++ {
		if n == limit || looked == 4*limit {
			return n, append([]byte(nil), k...), nil
		}
		scope := k[8:]
		r, derr := decodeIdem(records.Get(scope))
		if derr == nil && !r.CreatedAt.Before(cutoff) {
			k, _ = c.Next() // made since: kept
			continue
		}
		// Made before cutoff, or unreadable (what cannot be replayed
		// holds no promise): removed.
		key := append([]byte(nil), k...)
		if err := records.Delete(scope); err != nil {
			return n, nil, err
		}
		if err := c.Delete(); err != nil {
			return n, nil, err
		}
		n++
		k, _ = c.Seek(key) // after a delete, Next can skip a key: bbolt
	}
	return n, nil, nil
}

// Idempotency records are binary, in the record codec's terms (codec.go):
// one is written for every event with a client id, and JSON was a fifth of
// the router's CPU on that path (docs/decisions/record-encoding.md).
// Records written before are JSON, which starts with '{', and still read.
//
//	u8 version (1) | bytes digest | uvarint status | str content type | bytes body
//	| uvarint n × str event id | time created | time expires
const idemVersion = 1

func encodeIdem(r *IdemRecord) []byte {
	n := 32 + len(r.Digest) + len(r.ContentType) + len(r.Body)
	for _, id := range r.EventIDs {
		n += 2 + len(id)
	}
	b := make([]byte, 0, n)
	b = append(b, idemVersion)
	b = appendBytes(b, r.Digest)
	b = binary.AppendUvarint(b, uint64(r.Status))
	b = appendStr(b, r.ContentType)
	b = appendBytes(b, r.Body)
	b = binary.AppendUvarint(b, uint64(len(r.EventIDs)))
	for _, id := range r.EventIDs {
		b = appendStr(b, id)
	}
	b = appendTime(b, r.CreatedAt)
	return appendTime(b, r.ExpiresAt)
}

// decodeIdem reads a record of either encoding; it copies what it keeps.
func decodeIdem(v []byte) (*IdemRecord, error) {
	r := new(IdemRecord)
	if len(v) > 0 && v[0] == '{' {
		if err := json.Unmarshal(v, r); err != nil {
			return nil, fmt.Errorf("storage: decode idempotency record: %w: %v", ErrCorrupt, err)
		}
		return r, nil
	}
	d := newDecoder(v)
	if d.u8() != idemVersion {
		return nil, fmt.Errorf("storage: decode idempotency record: %w: unknown version", ErrCorrupt)
	}
	r.Digest = d.bytes()
	r.Status = int(d.uvarint())
	r.ContentType = d.str()
	r.Body = d.bytes()
	if n := d.count(); n > 0 {
		r.EventIDs = make([]string, n)
		for i := range r.EventIDs {
			r.EventIDs[i] = d.str()
		}
	}
	r.CreatedAt = d.time()
	r.ExpiresAt = d.time()
	if d.err != nil || len(d.b) != 0 {
		return nil, fmt.Errorf("storage: decode idempotency record: %w", ErrCorrupt)
	}
	return r, nil
}
