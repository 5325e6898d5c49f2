package engine

import (
	"encoding/base64"
	"encoding/binary"
	"hash/fnv"

	"github.com/switchyard-router/switchyard"
)

// A cursor is where a listing's next page starts, as the API hands it out:
// opaque to clients, safe in a URL. Its first byte names the listing it
// belongs to, so that one listing's cursor is refused by another instead
// of being read as a place to start from; the next four are a hash of the
// listing's filters (the DLQ's status and type, the claims' consumer), so
// that a cursor given with other filters than its page's is refused too
// (a new-user trial: `router dlq list -status resolved` ended with a hint
// that dropped the status, and its cursor, given without it, paged through
// the unresolved dead letters from an unrelated place, without a word).
type CursorKind byte

// The listings that page with a cursor. CursorDLQ is 1 because the DLQ's
// cursors, the first ones, began with a version byte 1 (those, and any
// handed out before the filters' hash, are refused now: a listing starts
// again from its first page).
const (
	CursorDLQ    CursorKind = 1 // GET /v1/dlq: a DLQ index position
	CursorClaims CursorKind = 2 // GET /v1/claims: a claim's key
	CursorState  CursorKind = 3 // GET /v1/plugins/{name}/state: a state key
)

// cursorHead is a cursor's bytes before its position: the kind, and the
// hash of its filters.
const cursorHead = 1 + 4

// EncodeCursor is the cursor of the position pos in a listing of kind with
// filters (the listing's parameters that choose what it lists, in any
// fixed spelling; "" when it has none).
func EncodeCursor(kind CursorKind, filters string, pos []byte) string {
	b := make([]byte, 0, cursorHead+len(pos))
	b = append(b, byte(kind))
	b = binary.BigEndian.AppendUint32(b, filterHash(filters))
	return base64.RawURLEncoding.EncodeToString(append(b, pos...))
}

// DecodeCursor returns the position of a cursor EncodeCursor made for kind
// and filters, or an EINVALIDREQUEST error when s is not one: made up,
// another listing's, a position valid refuses (one of this listing's, but
// for other parameters, such as another prefix), or one handed out with
// other filters.
func DecodeCursor(kind CursorKind, filters, s string, valid func(pos []byte) bool) ([]byte, error) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || len(b) <= cursorHead || CursorKind(b[0]) != kind || !valid(b[cursorHead:]) {
		return nil, switchyard.Errorf(switchyard.EINVALIDREQUEST, "cursor %q is not one this router handed out for this listing", switchyard.Truncate(s, 64))
	}
	if binary.BigEndian.Uint32(b[1:cursorHead]) != filterHash(filters) {
		return nil, switchyard.Errorf(switchyard.EINVALIDREQUEST,
			"cursor %q was handed out for this listing with other filters: give it with the filters of the page it ended", switchyard.Truncate(s, 64))
	}
	return b[cursorHead:], nil
}

func filterHash(filters string) uint32 {
	h := fnv.New32a()
	h.Write([]byte(filters))
	return h.Sum32()
}
