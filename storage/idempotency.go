package storage

import (
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
	v := tx.bucket(bucketIdem).Get([]byte(scope))
	if v == nil {
		return nil, ErrNotFound
	}
	r := new(IdemRecord)
	if err := json.Unmarshal(v, r); err != nil {
		return nil, fmt.Errorf("storage: decode idempotency record: %w", err)
	}
	if !now.Before(r.ExpiresAt) {
		return nil, ErrNotFound
	}
	return r, nil
}

// PutIdempotency stores r under scope until r.ExpiresAt, replacing an
// expired record of the same scope.
func (tx *Tx) PutIdempotency(scope string, r *IdemRecord) error {
	b := tx.bucket(bucketIdem)
	if old := b.Get([]byte(scope)); old != nil {
		var o IdemRecord
		if err := json.Unmarshal(old, &o); err == nil {
			if err := tx.bucket(bucketIdemExp).Delete(timeKey(o.ExpiresAt, []byte(scope))); err != nil {
				return err
			}
		}
	}
	v, err := json.Marshal(r)
	if err != nil {
		return err
	}
	if err := b.Put([]byte(scope), v); err != nil {
		return err
	}
	return tx.bucket(bucketIdemExp).Put(timeKey(r.ExpiresAt, []byte(scope)), nil)
}

// DeleteExpiredIdempotency removes up to limit idempotency records whose
// window ended before now.
func (tx *Tx) DeleteExpiredIdempotency(now time.Time, limit int) (int, error) {
	return tx.expire(bucketIdemExp, now, limit, func(scope []byte) error {
		return tx.bucket(bucketIdem).Delete(scope)
	})
}
