package engine

import "testing"

// An output's id is its event's own only when it is the event's id or
// derived from it as "<id>/...": "p-1" is another event's, not p's.
func TestOwnOutputID(t *testing.T) {
	for id, want := range map[string]bool{"p": true, "p/0": true, "p/12/x": true, "p-1": false, "pp": false, "": false, "q/0": false} {
		if got := ownOutputID("p", id); got != want {
			t.Errorf("ownOutputID(p, %q) = %v, want %v", id, got, want)
		}
	}
}
