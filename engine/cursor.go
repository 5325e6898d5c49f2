package engine

import (
	"encoding/base64"

	"github.com/switchyard-router/switchyard"
)

// A cursor is where a listing's next page starts, as the API hands it out:
// opaque to clients, safe in a URL. Its first byte names the listing it
// belongs to, so that one listing's cursor is refused by another instead
// of being read as a place to start from.
type CursorKind byte

// The listings that page with a cursor. CursorDLQ is 1 because the DLQ's
// cursors, the first ones, began with a version byte 1.
const (
	CursorDLQ    CursorKind = 1 // GET /v1/dlq: a DLQ index position
	CursorClaims CursorKind = 2 // GET /v1/claims: a claim's key
	CursorState  CursorKind = 3 // GET /v1/plugins/{name}/state: a state key
)

// EncodeCursor is the cursor of the position pos in a listing of kind.
func EncodeCursor(kind CursorKind, pos []byte) string {
	return base64.RawURLEncoding.EncodeToString(append([]byte{byte(kind)}, pos...))
}

// DecodeCursor returns the position of a cursor EncodeCursor made for
// kind, or an EINVALIDREQUEST error when s is not one: made up, another listing's,
// or a position valid refuses (one of this listing's, but for other
// parameters, such as another prefix).
func DecodeCursor(kind CursorKind, s string, valid func(pos []byte) bool) ([]byte, error) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || len(b) < 2 || CursorKind(b[0]) != kind || !valid(b[1:]) {
		return nil, switchyard.Errorf(switchyard.EINVALIDREQUEST, "cursor %q is not one this router handed out for this listing", Truncate(s, 64))
	}
	return b[1:], nil
}
