package api

import "time"

// SetTailKeepAlive sets how often a quiet tail stream sends a comment, and
// returns the undo.
func SetTailKeepAlive(d time.Duration) (undo func()) {
	old := tailKeepAlive
	tailKeepAlive = d
	return func() { tailKeepAlive = old }
}
