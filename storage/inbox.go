package storage

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The inbox's own buckets (the received events themselves are records in
// the events bucket, waiting in the queue "inbox:<name>"):
//
//	inbox_ids           inbox ‖ 1 ‖ len(id) ‖ id ‖ source → Seen (JSON)
//	                    (inboxKey's form): events accepted, for dedup; until
//	                    schema 4 inbox ‖ 0 ‖ id, without the source
//	inbox_exp           expires ‖ inbox_ids key → nil     their TTL index
//	audit/<inbox>       at ‖ seq → Skip (JSON)            dropped redeliveries
//	claims              tenant ‖ 0 ‖ consumer ‖ 0 ‖ id → Claim (JSON)
//	claims_exp          expires ‖ claim key → nil
//	inbox_reads         inbox ‖ 0 ‖ group ‖ 0 ‖ topic ‖ 0 ‖ partition → next ‖ id
//	                    (inboxread.go): where an inbox's reading goes on from
var (
	bucketInboxReads = []byte("inbox_reads")
	bucketInboxIDs   = []byte("inbox_ids")
	bucketInboxExp   = []byte("inbox_exp")
	bucketAudit      = []byte("audit")
	bucketClaims     = []byte("claims")
	bucketClaimExp   = []byte("claims_exp")
)

// Seen is what the inbox remembers of an accepted id: where it first came
// from, so a dropped redelivery can point at the first delivery.
type Seen struct {
	Origin     string    `json:"origin"`
	ReceivedAt time.Time `json:"received_at"`
	ExpiresAt  time.Time `json:"expires_at"`
}

// SkipReason says why an inbox dropped a message.
type SkipReason string

const (
	SkipDuplicate        SkipReason = "duplicate"          // its id was seen within the ttl, or its record stands
	SkipDuplicateInBatch SkipReason = "duplicate_in_batch" // an earlier message of the same batch had its id
	SkipNoID             SkipReason = "no_id"              // no id, with missing_id = "reject"
	SkipIDTooLong        SkipReason = "id_too_long"        // an id longer than the inbox keeps, with missing_id = "reject"
)

// SkipReasons are every SkipReason.
var SkipReasons = []SkipReason{SkipDuplicate, SkipDuplicateInBatch, SkipNoID, SkipIDTooLong}

// Skip is one dropped redelivery in the dedup audit.
type Skip struct {
	ID          string     `json:"id"`
	Source      string     `json:"source"`
	At          time.Time  `json:"at"`
	Reason      SkipReason `json:"reason"`
	Origin      string     `json:"origin"` // where the skipped copy came from
	FirstOrigin string     `json:"first_origin,omitempty"`
	FirstAt     time.Time  `json:"first_at,omitzero"`
}

// InboxSeen returns what inbox remembers of the event source + id, or
// ErrNotFound (also once its window has passed). An id remembered before
// data file schema 4, without its source, still counts while its window
// lasts: for the source of the record it left in queue, or for any source
// once that record is gone (what it did then).
func (tx *Tx) InboxSeen(inbox, queue, source, id string, now time.Time) (*Seen, error) {
	s, err := tx.inboxSeen(appendInboxKey(tx.scratch(), inbox, source, id), now)
	if !errors.Is(err, ErrNotFound) {
		return s, err
	}
	if s, err = tx.inboxSeen(appendIDOnlyInboxKey(tx.scratch(), inbox, id), now); err != nil {
		return nil, err
	}
	if r, err := tx.oldFormRecord(queue, id); err == nil && r.Event.Source != source {
		return nil, ErrNotFound
	}
	return s, nil
}

// inboxSeen reads the ids index's entry under k (keyAt's rules).
func (tx *Tx) inboxSeen(k []byte, now time.Time) (*Seen, error) {
	v := tx.get(tx.bucket(bucketInboxIDs), k)
	if v == nil {
		return nil, ErrNotFound
	}
	s := new(Seen)
	if err := json.Unmarshal(v, s); err != nil {
		return nil, fmt.Errorf("storage: decode inbox id: %w", err)
	}
	if !now.Before(s.ExpiresAt) {
		return nil, ErrNotFound
	}
	return s, nil
}

// InboxRecord is queue's record of the event source + id, or ErrNotFound:
// under its key, or, stored before data file schema 4, under its id's
// alone when that record's source is source.
func (tx *Tx) InboxRecord(queue, source, id string) (*Record, error) {
	r, err := tx.inboxRecord(appendInboxKey(tx.scratch(), queue, source, id), queue)
	if !errors.Is(err, ErrNotFound) {
		return r, err
	}
	if r, err = tx.oldFormRecord(queue, id); err == nil && r.Event.Source != source {
		return nil, ErrNotFound
	}
	return r, err
}

// inboxRecord is the record under key (keyAt's rules) if it is one of
// queue's, or ErrNotFound: a key built from what a client sent (an ack
// id) names no other queue's record, nor an outbound event's.
func (tx *Tx) inboxRecord(key []byte, queue string) (*Record, error) {
	r, err := tx.recordAt(key)
	if err == nil && r.Queue != queue {
		return nil, ErrNotFound
	}
	return r, err
}

// oldFormRecord is queue's record of the id id stored before data file
// schema 4, under the key of its id alone (idOnlyInboxKey), or ErrNotFound.
func (tx *Tx) oldFormRecord(queue, id string) (*Record, error) {
	return tx.inboxRecord(appendIDOnlyInboxKey(tx.scratch(), queue, id), queue)
}

// InboxRecordByRef is the record of queue an ack id (InboxRef) names, or
// ErrNotFound.
func (tx *Tx) InboxRecordByRef(queue, ref string) (*Record, error) {
	key, ok := inboxRefKey(queue, ref)
	if !ok {
		return nil, ErrNotFound
	}
	return tx.inboxRecord(tx.keyOf(key), queue)
}

// InboxRecords is every record queue holds of the event id id, whatever
// its source: the API names an inbox's events by their ids, and by their
// sources too only where two share an id.
func (tx *Tx) InboxRecords(queue, id string) ([]*Record, error) {
	var out []*Record
	switch r, err := tx.oldFormRecord(queue, id); {
	case err == nil:
		out = append(out, r)
	case !errors.Is(err, ErrNotFound):
		return nil, err
	}
	prefix := appendInboxIDPrefix(nil, queue, id) // kept through the walk: not the scratch buffer
	c := tx.bucket(bucketEvents).Cursor()
	for k, v := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
		r, err := decodeRecord(v)
		if err != nil {
			return nil, err
		}
		if r.Queue == queue {
			out = append(out, r)
		}
	}
	return out, nil
}

// InboxRef names an inbox's record to a client (a pull's ack_id): its key
// after the queue's name, base64url. Unlike the event's id it names one
// record when two sources share an id. Opaque to clients;
// InboxRecordByRef reads it back.
func InboxRef(r *Record) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strings.TrimPrefix(r.Key(), r.Queue)))
}

// inboxRefKey is the key of the record ref names in queue, or false when
// ref is no InboxRef (it could then name no record of queue).
func inboxRefKey(queue, ref string) (string, bool) {
	b, err := base64.RawURLEncoding.DecodeString(ref)
	if err != nil || len(b) < 2 || b[0] > 1 { // the 0 of idOnlyInboxKey, the 1 of inboxKey
		return "", false
	}
	return queue + string(b), true
}

// PutInboxSeen records the event source + id as accepted by inbox until
// s.ExpiresAt.
func (tx *Tx) PutInboxSeen(inbox, source, id string, s *Seen) error {
	k := appendInboxKey(nil, inbox, source, id)
	b := tx.bucket(bucketInboxIDs)
	if old := tx.get(b, k); old != nil { // expired, not yet cleaned: drop its index entry
		var o Seen
		if json.Unmarshal(old, &o) == nil {
			if err := tx.bucket(bucketInboxExp).Delete(timeKey(o.ExpiresAt, k)); err != nil {
				return err
			}
		}
	}
	v, err := json.Marshal(s)
	if err != nil {
		return err
	}
	if err := b.Put(k, v); err != nil {
		return err
	}
	return tx.bucket(bucketInboxExp).Put(timeKey(s.ExpiresAt, k), nil)
}

// DeleteExpiredInboxIDs forgets up to limit ids whose window ended.
func (tx *Tx) DeleteExpiredInboxIDs(now time.Time, limit int) (int, error) {
	return tx.expire(bucketInboxExp, now, limit, func(k []byte) error {
		return tx.bucket(bucketInboxIDs).Delete(k)
	})
}

// AddSkip appends a dropped redelivery to inbox's audit.
func (tx *Tx) AddSkip(inbox string, s *Skip) error {
	b, err := tx.sub(bucketAudit, inbox)
	if err != nil {
		return err
	}
	seq, err := b.NextSequence()
	if err != nil {
		return err
	}
	v, err := json.Marshal(s)
	if err != nil {
		return err
	}
	return b.Put(timeKey(s.At, u64(seq)), v)
}

// Skips lists inbox's audit, newest first, up to limit entries older than
// before (zero = from the newest).
func (tx *Tx) Skips(inbox string, before time.Time, limit int) ([]Skip, error) {
	b, _ := tx.sub(bucketAudit, inbox)
	if b == nil {
		return nil, nil
	}
	var out []Skip
	c := b.Cursor()
	k, v := c.Last()
	if !before.IsZero() {
		c.Seek(u64(timeBound(before)))
		k, v = c.Prev()
	}
	for ; k != nil && len(out) < limit; k, v = c.Prev() {
		var s Skip
		if err := json.Unmarshal(v, &s); err != nil {
			return nil, fmt.Errorf("storage: decode audit entry: %w", err)
		}
		out = append(out, s)
	}
	return out, nil
}

// DeleteOldSkips removes up to limit audit entries of inbox older than
// cutoff.
func (tx *Tx) DeleteOldSkips(inbox string, cutoff time.Time, limit int) (int, error) {
	b, _ := tx.sub(bucketAudit, inbox)
	if b == nil {
		return 0, nil
	}
	n := 0
	c := b.Cursor()
	for k, _ := c.First(); k != nil && n < limit && binary.BigEndian.Uint64(k) < uint64(cutoff.UnixNano()); k, _ = c.First() {
		if err := c.Delete(); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

// ClaimState is where a claim is.
type ClaimState string

const (
	ClaimHeld      ClaimState = "claimed"
	ClaimCompleted ClaimState = "completed"
)

// ClaimMode is how the arbiter hands an id out: once, with a lease whose
// end lets another claim take it (effectively once), or once for good
// (at most once).
type ClaimMode string

const (
	ClaimEffectivelyOnce ClaimMode = "effectively_once"
	ClaimAtMostOnce      ClaimMode = "at_most_once"
)

// Claim is the dedup arbiter's record of one id for one consumer.
type Claim struct {
	State       ClaimState      `json:"state"`
	Mode        ClaimMode       `json:"mode"`
	LeaseUntil  time.Time       `json:"lease_until,omitzero"`
	ClaimedAt   time.Time       `json:"claimed_at"`
	CompletedAt time.Time       `json:"completed_at,omitzero"`
	Result      json.RawMessage `json:"result,omitempty"`
	ExpiresAt   time.Time       `json:"expires_at"`
	// Earlier are the tokens of the earlier claims of the id whose leases
	// ran out, oldest first, at most MaxEarlierTokens; TracksEarlier says
	// the claim keeps them (a claim stored by a router before it did not).
	Earlier       []string `json:"earlier_tokens,omitempty"`
	TracksEarlier bool     `json:"tracks_earlier,omitempty"`
}

// MaxEarlierTokens bounds Claim.Earlier: a token older than those is
// called not this id's, not an earlier claim's.
const MaxEarlierTokens = 16

// Follow records that c takes the id over from old, whose lease ran out:
// old's token is kept among the earlier ones.
func (c *Claim) Follow(old *Claim) {
	earlier := append(slices.Clone(old.Earlier), old.Token())
	c.Earlier = earlier[max(0, len(earlier)-MaxEarlierTokens):]
}

// Token names this claim of its id apart from every other: the time it
// was claimed, in nanoseconds (an id is claimed again only once a lease
// has run out, later). Complete and release need it: a holder whose lease
// ran out cannot then act on the next holder's claim (a fencing token).
func (c *Claim) Token() string { return strconv.FormatInt(c.ClaimedAt.UnixNano(), 36) }

// ClaimedAfter reports whether token is the token of an earlier claim of
// the same id (its lease ran out, and the id was claimed again): one of
// Earlier. Of a claim stored before those were kept, whether it may be: a
// token names when its claim was made, so it reads as a time before this
// one's. A token that reads as no time since 2000 (a typo: "wrong" is a
// number in base 36, from 1970), or as this claim's time or a later one,
// is not; another id's older token is taken for one (an adversarial trial).
func (c *Claim) ClaimedAfter(token string) bool {
	if c.TracksEarlier {
		return slices.Contains(c.Earlier, token)
	}
	at, err := strconv.ParseInt(token, 36, 64)
	return err == nil && at >= tokensSince && at < c.ClaimedAt.UnixNano()
}

// tokensSince is the earliest time a token (Claim.Token) may read as.
var tokensSince = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()

func claimKey(tenant, consumer, id string) []byte {
	return []byte(tenant + "\x00" + consumer + "\x00" + id)
}

// Claim returns the claim of id, or ErrNotFound (also once expired).
func (tx *Tx) Claim(tenant, consumer, id string, now time.Time) (*Claim, error) {
	v := tx.bucket(bucketClaims).Get(claimKey(tenant, consumer, id))
	if v == nil {
		return nil, ErrNotFound
	}
	c := new(Claim)
	if err := json.Unmarshal(v, c); err != nil {
		return nil, fmt.Errorf("storage: decode claim: %w", err)
	}
	if !now.Before(c.ExpiresAt) {
		return nil, ErrNotFound
	}
	return c, nil
}

// PutClaim stores c, replacing any earlier claim of the id.
func (tx *Tx) PutClaim(tenant, consumer, id string, c *Claim) error {
	if err := tx.DeleteClaim(tenant, consumer, id); err != nil {
		return err
	}
	k := claimKey(tenant, consumer, id)
	v, err := json.Marshal(c)
	if err != nil {
		return err
	}
	if err := tx.bucket(bucketClaims).Put(k, v); err != nil {
		return err
	}
	return tx.bucket(bucketClaimExp).Put(timeKey(c.ExpiresAt, k), nil)
}

// DeleteClaim removes the claim of id, if any.
func (tx *Tx) DeleteClaim(tenant, consumer, id string) error {
	k := claimKey(tenant, consumer, id)
	b := tx.bucket(bucketClaims)
	old := b.Get(k)
	if old == nil {
		return nil
	}
	var o Claim
	if err := json.Unmarshal(old, &o); err != nil {
		return errors.Join(fmt.Errorf("storage: decode claim: %w", err), b.Delete(k))
	}
	if err := tx.bucket(bucketClaimExp).Delete(timeKey(o.ExpiresAt, k)); err != nil {
		return err
	}
	return b.Delete(k)
}

// DeleteExpiredClaims removes up to limit claims past their TTL.
func (tx *Tx) DeleteExpiredClaims(now time.Time, limit int) (int, error) {
	return tx.expire(bucketClaimExp, now, limit, func(k []byte) error {
		return tx.bucket(bucketClaims).Delete(k)
	})
}

// ListedClaim is a claim with what its key says: who holds it, for which
// consumer, on which id.
type ListedClaim struct {
	Tenant, Consumer, ID string
	Claim
}

// IsClaimKey reports whether k has the form of a claim's key (tenant,
// consumer and id, NUL apart).
func IsClaimKey(k []byte) bool { return bytes.Count(k, []byte{0}) == 2 }

// Claims lists up to limit unexpired claims of consumer ("" = every
// consumer), by tenant, consumer and id, starting after the claim key
// after (nil = from the first). next is the key to start the page after
// from, nil at the end.
func (tx *Tx) Claims(consumer string, now time.Time, after []byte, limit int) (out []ListedClaim, next []byte, err error) {
	c := tx.bucket(bucketClaims).Cursor()
	k, v := c.First()
	if after != nil {
		if k, v = c.Seek(after); k != nil && bytes.Equal(k, after) {
			k, v = c.Next()
		}
	}
	for ; k != nil; k, v = c.Next() {
		parts := strings.SplitN(string(k), "\x00", 3)
		if len(parts) != 3 || (consumer != "" && parts[1] != consumer) {
			continue
		}
		var cl Claim
		if err := json.Unmarshal(v, &cl); err != nil {
			return nil, nil, fmt.Errorf("storage: decode claim: %w", err)
		}
		if !now.Before(cl.ExpiresAt) {
			continue
		}
		if len(out) == limit {
			return out, out[len(out)-1].key(), nil
		}
		out = append(out, ListedClaim{Tenant: parts[0], Consumer: parts[1], ID: parts[2], Claim: cl})
	}
	return out, nil, nil
}

func (c *ListedClaim) key() []byte { return claimKey(c.Tenant, c.Consumer, c.ID) }
