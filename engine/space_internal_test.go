package engine

import (
	"errors"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/switchyard-router/switchyard"
	"github.com/switchyard-router/switchyard/config"
	"github.com/switchyard-router/switchyard/storage"
)

// fixedMeter measures what it is given: sp by Space, *used by Used (the
// pages in use after the writes since).
type fixedMeter struct {
	sp   storage.Space
	used *int64
}

// Space is sp, but for the pages in use since grown (used): they take the
// file's reusable pages first, then the disk's free bytes.
func (m fixedMeter) Space() (storage.Space, error) {
	sp := m.sp
	if m.used != nil {
		grown := *m.used - sp.Used
		fromFile := min(grown, sp.Reusable)
		sp.Used, sp.Reusable, sp.DiskFree = *m.used, sp.Reusable-fromFile, sp.DiskFree-(grown-fromFile)
	}
	return sp, nil
}
func (m fixedMeter) Used() int64 {
	if m.used == nil {
		return m.sp.Used
	}
	return *m.used
}

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
		w := &spaceWatch{meter: fixedMeter{sp: c.sp}}
		if st := w.measure(config.Storage{MinFree: 100}); (st.full != nil) != c.full {
			t.Errorf("%+v against min_free 100: full %v, want %v", c.sp, st.full, c.full)
		}
	}
}

// Between two measurements, a request is refused once the pages in use
// grew past the room the last one left (under max_size, above min_free),
// so a burst overshoots the budget by one commit at most, not by what it
// writes until the next measurement.
func TestWritesSinceTheMeasurementCountAgainstTheBudget(t *testing.T) {
	for _, c := range []struct {
		sp               storage.Space
		maxSize, minFree int64
		grown            int64
		refused          bool
	}{
		{storage.Space{Used: 900}, 1000, 0, 100, false},
		{storage.Space{Used: 900}, 1000, 0, 101, true},
		{storage.Space{Used: 900, DiskFree: 500}, 0, 300, 200, false},
		{storage.Space{Used: 900, DiskFree: 500}, 0, 300, 201, true},
		{storage.Space{Used: 900, DiskFree: 500}, 1000, 300, 150, true}, // max_size the nearer
		{storage.Space{Used: 900, DiskFree: 500}, 0, 0, 1 << 40, false}, // no budget
	} {
		used := c.sp.Used
		w := &spaceWatch{meter: fixedMeter{sp: c.sp, used: &used}}
		if st := w.measure(config.Storage{MaxSize: c.maxSize, MinFree: c.minFree}); st.full != nil {
			t.Fatalf("%+v: full at the measurement: %v", c, st.full)
		}
		if err := w.check(); err != nil {
			t.Fatalf("%+v: refused before any write: %v", c, err)
		}
		used += c.grown
		if err := w.check(); (err != nil) != c.refused || (err != nil && switchyard.ErrorCode(err) != switchyard.ESTORAGEFULL) {
			t.Errorf("%+v grown by %d: %v, want refused %v", c, c.grown, err, c.refused)
		}
		// What refused a request is full at the next measurement, which
		// makes room: no other signal is needed.
		if st := w.measure(config.Storage{MaxSize: c.maxSize, MinFree: c.minFree}); c.refused && st.full == nil {
			t.Errorf("%+v grown by %d: refused, but the next measurement has room", c, c.grown)
		}
	}
}

// Delivery waits once the free room outside the reserve is down to the
// reserve's size again (a quarter of min_free, at most 16 MiB): at the
// measurement, or after the writes since have grown the pages in use by
// what was left above it — but only while the file keeps delivered records
// for the cleanup to remove. The reserve itself counts as room for
// min_free: holding it does not refuse ingest.
func TestDeliveryWaitsShortOfTheReserve(t *testing.T) {
	const minFree = 8 << 20 // a reserve of 2 MiB
	for _, c := range []struct {
		sp    storage.Space
		grown int64
		held  bool
	}{
		{storage.Space{DiskFree: 6 << 20, Reserve: 2 << 20}, 0, false},
		{storage.Space{DiskFree: 6 << 20, Reserve: 2 << 20}, 4<<20 - 1, false},
		{storage.Space{DiskFree: 6 << 20, Reserve: 2 << 20}, 4 << 20, true},
		{storage.Space{DiskFree: 1 << 20, Reusable: 1 << 20, Reserve: 2 << 20}, 0, true},
		{storage.Space{DiskFree: 1 << 20, Reusable: 1 << 20}, 0, true}, // the reserve given up
		{storage.Space{DiskFree: 2 << 20, Reusable: 1 << 20}, 0, false},
	} {
		used := c.sp.Used
		w := &spaceWatch{meter: fixedMeter{sp: c.sp, used: &used}}
		w.delivered.Store(true)
		w.measure(config.Storage{MinFree: minFree})
		used += c.grown
		if held := w.deliveryHeld(); held != c.held {
			t.Errorf("%+v grown by %d: delivery held %v, want %v", c.sp, c.grown, held, c.held)
		}
		// Nothing delivered, nothing the cleanup can remove: waiting
		// would make no room.
		w.delivered.Store(false)
		if w.deliveryHeld() {
			t.Errorf("%+v grown by %d: delivery held with no delivered record to remove", c.sp, c.grown)
		}
	}
	// Without a floor there is no reserve, and delivery never waits.
	w := &spaceWatch{meter: fixedMeter{sp: storage.Space{}}}
	w.measure(config.Storage{})
	if w.deliveryHeld() {
		t.Error("delivery held without min_free")
	}
	// The reserve is room: 6 MiB free and 2 MiB held meet min_free = 8 MiB.
	w = &spaceWatch{meter: fixedMeter{sp: storage.Space{DiskFree: 6 << 20, Reserve: 2 << 20}}}
	if st := w.measure(config.Storage{MinFree: minFree}); st.full != nil {
		t.Errorf("the reserve not counted as room: %v", st.full)
	}
}

// Delivery stops when the room outside the reserve is down to the
// reserve's size and resumes once it is back to twice that, whether the
// loops see it between measurements (as the pages in use grow, or shrink
// with the cleanup's commits) or at one. Before, it resumed at the first
// cleanup commit after a measurement that held it (the room was counted
// from that measurement's line, clamped at zero), and near the line it
// waited and resumed at every check.
func TestDeliveryResumesWithRoomToSpare(t *testing.T) {
	const minFree, reserve, mib = 8 << 20, 2 << 20, 1 << 20
	used := int64(100 * mib)
	w := &spaceWatch{meter: fixedMeter{sp: storage.Space{Used: used, DiskFree: 6 * mib, Reserve: reserve}, used: &used}}
	w.delivered.Store(true)
	for _, step := range []struct {
		what    string
		grown   int64 // the pages in use since the step before
		measure bool  // a measurement before the check (else only the loops' check)
		held    bool
	}{
		{"6 MiB outside the reserve", 0, true, false},
		{"delivery took it down to 2 MiB, the reserve's size", 4 * mib, false, true},
		{"measured there", 0, true, true},
		{"the cleanup's commit made half a MiB", -mib / 2, false, true},
		{"measured at 2.5 MiB", 0, true, true},
		{"the cleanup made 1.5 MiB more, and a byte", -(3*mib/2 + 1), false, false},
		{"delivery took 1 MiB of it: 3 MiB left, over the stopping line", mib, false, false},
		{"measured at 3 MiB", 0, true, false},
		{"down to 2 MiB again", mib + 1, false, true},
	} {
		used += step.grown
		if step.measure {
			w.measure(config.Storage{MinFree: minFree})
		}
		if held := w.deliveryHeld(); held != step.held {
			t.Errorf("%s: delivery held %v, want %v", step.what, held, step.held)
		}
	}
}

// failingReserve is a store whose reserve cannot be made (a quota, or a
// filesystem that says it has room it does not give); it counts the tries.
type failingReserve struct {
	Store
	tries int
}

func (f *failingReserve) HoldReserve(int64) (bool, error) {
	f.tries++
	return false, errors.New("disk quota exceeded")
}
func (f *failingReserve) ReserveReleased() uint64 { return 0 }

// A reserve that could not be made is not tried again at each measurement
// (every 250 ms: where the reserve is written byte by byte, 16 MiB each
// time), but after reserveRetryAfter.
func TestAFailedReserveIsNotRetriedAtEachMeasurement(t *testing.T) {
	store := &failingReserve{}
	e := &Engine{store: store, log: hclog.NewNullLogger()}
	cfg := config.Storage{MinFree: 64 << 20}
	var said spaceSaid
	for range 4 {
		e.keepReserve(cfg, storage.Space{DiskFree: 1 << 30}, &said)
	}
	if store.tries != 1 {
		t.Fatalf("%d tries in four measurements, want 1", store.tries)
	}
	said.reserveRetry = time.Now().Add(-time.Second) // reserveRetryAfter later
	e.keepReserve(cfg, storage.Space{DiskFree: 1 << 30}, &said)
	if store.tries != 2 {
		t.Fatalf("%d tries after the wait, want 2", store.tries)
	}
}
