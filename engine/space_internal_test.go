package engine

import (
	"testing"

	"github.com/switchyard-router/switchyard/storage"
)

// fixedMeter measures what it is given.
type fixedMeter storage.Space

func (m fixedMeter) Space() (storage.Space, error) { return storage.Space(m), nil }

// The min_free floor counts the room inside the data file as well as the
// disk's: bbolt never gives free pages back to the disk, so after a
// backlog drains the disk stays as full as it was, and only the file's
// reusable bytes say that ingest may resume.
func TestMinFreeCountsTheFilesOwnRoom(t *testing.T) {
	for _, c := range []struct {
		sp   storage.Space
		full bool
	}{
		{storage.Space{DiskFree: 50, Reusable: 100}, false},
		{storage.Space{DiskFree: 50, Reusable: 10}, true},
		{storage.Space{DiskFree: 150}, false},
		{storage.Space{DiskFree: 99}, true},
	} {
		w := &spaceWatch{meter: fixedMeter(c.sp)}
		if st := w.measure(0, 100); (st.full != nil) != c.full {
			t.Errorf("%+v against min_free 100: full %v, want %v", c.sp, st.full, c.full)
		}
	}
}
