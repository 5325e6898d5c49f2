package engine

import (
	"encoding/base64"

	"github.com/switchyard-router/switchyard"
)

// A cursor is where a listing's next page starts, as the API hands it out:
// opaque to clients (the DLQ, the claims, a plugin's state keys), safe in a
// URL, and prefixed with a version so its form can change.
const cursorVersion = 1

// EncodeCursor is the cursor of the position pos.
func EncodeCursor(pos []byte) string {
	return base64.RawURLEncoding.EncodeToString(append([]byte{cursorVersion}, pos...))
}

// DecodeCursor returns the position of a cursor EncodeCursor made, or an
// EINVALID error when s is not one or valid refuses its position (a cursor
// of another listing, or one a client made up).
func DecodeCursor(s string, valid func(pos []byte) bool) ([]byte, error) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || len(b) == 0 || b[0] != cursorVersion || !valid(b[1:]) {
		return nil, switchyard.Errorf(switchyard.EINVALID, "cursor %q is not one this router handed out", Truncate(s, 64))
	}
	return b[1:], nil
}

// AnyPosition accepts every position (a state key may be any bytes).
func AnyPosition([]byte) bool { return true }
