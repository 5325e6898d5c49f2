package storage

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	bolt "go.etcd.io/bbolt"

	"github.com/switchyard-router/switchyard"
	"github.com/switchyard-router/switchyard/internal/testkit"
)

// diskEvent is the event the disk benchmarks store: a UUIDv7 id, as the
// router assigns, and 400 bytes of JSON data (about 550 bytes encoded).
func diskEvent(now time.Time) *Record {
	data := make([]byte, 400)
	for i := range data {
		data[i] = 'a' + byte(i%26)
	}
	data[0], data[len(data)-1] = '"', '"'
	return &Record{
		Event: switchyard.Event{
			ID: uuid.Must(uuid.NewV7()).String(), Type: "orders.created", Source: "/shop/checkout", SpecVersion: "1.0",
			Time: now, DataContentType: "application/json", Data: data,
		},
		Tenant:    DefaultTenant,
		CreatedAt: now,
	}
}

// insertBatches stores n disk events, 100 to a transaction as ingest's
// group commit joins them, and returns their encoded size.
func insertBatches(b testing.TB, db *DB, n int) (encoded int) {
	now := time.Now()
	for done := 0; done < n; {
		err := db.Update(context.Background(), func(tx *Tx) error {
			for i := 0; i < 100 && done < n; i++ {
				r := diskEvent(now)
				if err := tx.InsertEvent(r, false); err != nil {
					return err
				}
				v, _ := encodeRecord(r)
				encoded += len(v)
				done++
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	return encoded
}

// pageUse is how full the file's leaf and branch pages are.
type pageUse struct {
	leafInuse, leafAlloc, branchInuse, branchAlloc int
	used                                           int64 // the pages in use up to the high-water mark (bbolt grows the file ahead of it)
}

func pagesOf(b testing.TB, path string) pageUse {
	bdb, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true})
	if err != nil {
		b.Fatal(err)
	}
	defer bdb.Close()
	var u pageUse
	bdb.View(func(tx *bolt.Tx) error {
		u.used = tx.Size()
		return tx.ForEach(func(_ []byte, bk *bolt.Bucket) error {
			s := bk.Stats()
			u.leafInuse += s.LeafInuse
			u.leafAlloc += s.LeafAlloc
			u.branchInuse += s.BranchInuse
			u.branchAlloc += s.BranchAlloc
			return nil
		})
	})
	return u
}

// BenchmarkStoredBytes measures the data file against what it holds: b.N
// pending events (at least 100,000) stored as ingest stores them. Reported:
// file bytes per event, the bytes of the pages up to the file's high-water
// mark per event (bbolt grows a file 16 MiB ahead), the encoded record per
// event, and how full the leaf and branch pages are.
func BenchmarkStoredBytes(b *testing.B) { eachFill(b, storedBytes) }

// eachFill runs bench with bbolt's default fill percent and with the
// router's, one after the other in one run.
func eachFill(b *testing.B, bench func(*testing.B)) {
	defer func() { fillByKeys = true }()
	for _, byKeys := range []bool{false, true} {
		name := map[bool]string{false: "bbolt-default", true: "fill-by-keys"}[byKeys]
		b.Run(name, func(b *testing.B) {
			fillByKeys = byKeys
			bench(b)
		})
	}
}

func storedBytes(b *testing.B) {
	n := max(b.N, 100_000)
	path := filepath.Join(b.TempDir(), "router.db")
	db, err := Open(path, Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	encoded := insertBatches(b, db, n)
	b.StopTimer()
	if err := db.Close(context.Background()); err != nil {
		b.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		b.Fatal(err)
	}
	u := pagesOf(b, path)
	b.ReportMetric(float64(fi.Size())/float64(n), "file-B/event")
	b.ReportMetric(float64(encoded)/float64(n), "record-B/event")
	b.ReportMetric(float64(u.used)/float64(n), "used-B/event")
	b.ReportMetric(float64(u.used)/float64(encoded), "used/record")
	b.ReportMetric(100*float64(u.leafInuse)/float64(max(u.leafAlloc, 1)), "leaf-fill-%")
	b.ReportMetric(100*float64(u.branchInuse)/float64(max(u.branchAlloc, 1)), "branch-fill-%")
}

// BenchmarkDeliveredBytes measures what delivering a backlog does to the
// file: 20,000 events stored 100 to a commit, then delivered 200 to a
// commit with one output each (a NATS destination and its stream
// position, as the loops record them). Reported: the pages in use per
// event before and after. Each delivered record grows by its output, and a
// full page that grows splits in two (docs/decisions/disk-full.md): with
// the router's time-ordered ids and 400 bytes of data the pages have the
// room; with client ids that land anywhere and small events they do not.
func BenchmarkDeliveredBytes(b *testing.B) {
	for _, c := range []struct {
		name      string
		dataBytes int
		clientIDs bool
	}{{"router-ids-400B", 400, false}, {"client-ids-110B", 110, true}} {
		b.Run(c.name, func(b *testing.B) {
			for range b.N {
				pending, delivered := deliveredBytes(b, c.dataBytes, c.clientIDs)
				b.ReportMetric(pending, "pending-B/event")
				b.ReportMetric(delivered, "delivered-B/event")
			}
		})
	}
}

func deliveredBytes(b *testing.B, dataBytes int, clientIDs bool) (pending, delivered float64) {
	const n = 20_000
	db := openTemp(b)
	now := time.Now()
	for k := 0; k < n; {
		err := db.Update(context.Background(), func(tx *Tx) error {
			for range 100 {
				r := diskEvent(now)
				r.Event.Data = append(r.Event.Data[:dataBytes-1], '"')
				if clientIDs { // 16 clients' ids, one count: "c-3-12345"
					r.Event.ID = fmt.Sprintf("c-%d-%d", k%16, k)
				}
				k++
				if err := tx.InsertEvent(r, false); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	used := func() float64 {
		u, err := db.pagesInUse()
		if err != nil {
			b.Fatal(err)
		}
		return float64(u) / n
	}
	pending = used()
	seq := uint64(0)
	for left := n; left > 0; {
		err := db.Update(context.Background(), func(tx *Tx) error {
			due, err := tx.Due("orders.created", now.Add(time.Hour), 0, Limit{Events: 200}, false, func([]byte) bool { return false })
			for _, r := range due {
				seq++
				r.Outputs = append(r.Outputs, Output{Destination: "nats.local:orders.created", Delivered: true, DeliveredAt: now,
					Position: &switchyard.Position{Stream: "events", Sequence: seq}})
				if err := tx.MarkDelivered(r, now, time.Hour); err != nil {
					return err
				}
			}
			left -= len(due)
			return err
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	return pending, used()
}

// BenchmarkSteadyBacklog measures whether the space TTL cleanup frees is
// used again: a backlog of 10,000 events, then rounds in which the oldest
// 1,000 are delivered and expired and 1,000 new ones arrive. Reported: the
// file's growth from the fifth round to the last (0 = a constant size),
// and its size per event of backlog.
func BenchmarkSteadyBacklog(b *testing.B) { eachFill(b, steadyBacklog) }

func steadyBacklog(b *testing.B) {
	const backlog, churn = 10_000, 1_000
	rounds := max(b.N, 30)
	path := filepath.Join(b.TempDir(), "router.db")
	db, err := Open(path, Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close(context.Background())
	var at5 int64
	b.ResetTimer()
	steadyRounds(b, db, backlog, churn, rounds, func(round int) {
		if round == 5 {
			at5 = fileSize(b, path)
		}
	})
	b.StopTimer()
	end := fileSize(b, path)
	b.ReportMetric(100*float64(end-at5)/float64(at5), "growth-%")
	b.ReportMetric(float64(end)/backlog, "file-B/event")
}

// steadyRounds stores a backlog, then runs rounds in which the oldest churn
// events are delivered and expired and churn new ones arrive; after each
// it calls after(round).
func steadyRounds(tb testing.TB, db *DB, backlog, churn, rounds int, after func(round int)) {
	insertBatches(tb, db, backlog)
	for round := 1; round <= rounds; round++ {
		deliverAndExpire(tb, db, churn)
		insertBatches(tb, db, churn)
		after(round)
	}
}

func fileSize(tb testing.TB, path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		tb.Fatal(err)
	}
	return fi.Size()
}

// A steady load at a constant backlog keeps the data file the same size
// over many TTL cleanup cycles: the pages the cleanup frees are written
// again. Six times the backlog flows through; were freed pages not reused,
// the high-water mark would grow about sixfold.
func TestSteadyBacklogKeepsFileFlat(t *testing.T) {
	const backlog, churn, rounds = 5_000, 500, 50
	path := filepath.Join(t.TempDir(), "router.db")
	db, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close(context.Background())
	highWater := func() (n int64) {
		db.bolt.View(func(tx *bolt.Tx) error { n = tx.Size(); return nil })
		return n
	}
	var file5, high5 int64
	steadyRounds(t, db, backlog, churn, rounds, func(round int) {
		if round == 5 {
			file5, high5 = fileSize(t, path), highWater()
		}
	})
	file, high := fileSize(t, path), highWater()
	t.Logf("after round 5: file %d B, high-water mark %d B; after round %d: %d B, %d B", file5, high5, rounds, file, high)
	if file != file5 || float64(high) > 1.05*float64(high5) {
		t.Fatalf("the file grew under a constant backlog: file %d → %d B, high-water mark %d → %d B", file5, file, high5, high)
	}
}

// deliverAndExpire delivers the n oldest pending events with a TTL of
// zero, then lets the cleanup remove them, as the loop and the cleanup do.
func deliverAndExpire(b testing.TB, db *DB, n int) {
	now := time.Now()
	err := db.Update(context.Background(), func(tx *Tx) error {
		due, err := tx.Due("orders.created", now.Add(time.Hour), 0, Limit{Events: n}, false, func([]byte) bool { return false })
		if err != nil {
			return err
		}
		for _, r := range due {
			if err := tx.MarkDelivered(r, now, 0); err != nil {
				return err
			}
		}
		return nil
	})
	if err == nil {
		err = db.Update(context.Background(), func(tx *Tx) error {
			_, err := tx.DeleteExpiredDelivered(now.Add(time.Second), n)
			return err
		})
	}
	if err != nil {
		b.Fatal(err)
	}
}

// Compacting an empty file says it is empty and leaves it, instead of
// bbolt's "bad file descriptor" from starting a new file through a
// read-only handle.
func TestCompactEmptyFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "empty.db")
	os.WriteFile(path, nil, 0o600)
	if _, err := CompactFile(path); err == nil || !strings.Contains(err.Error(), "is empty: not a data file") {
		t.Fatalf("compact of an empty file: %v", err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Size() != 0 {
		t.Fatalf("the empty file after: %v %v", fi, err)
	}
}

// Compacting a file whose backlog was delivered and expired gives the space
// back: the file shrinks to a fraction, every remaining record reads back,
// the copy passes the consistency check, and a router opens it again. A
// file a router has open is refused and left alone.
func TestCompactFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "router.db")
	db, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	insertBatches(t, db, 20_000)
	deliverAndExpire(t, db, 19_000)
	var keep []string
	db.View(func(tx *Tx) error {
		due, _ := tx.Due("orders.created", time.Now().Add(time.Hour), 0, Limit{Events: 2000}, false, func([]byte) bool { return false })
		for _, r := range due {
			keep = append(keep, r.Key())
		}
		return nil
	})
	if _, err := CompactFile(path); err == nil || !strings.Contains(err.Error(), "running router") {
		t.Fatalf("compacting an open file: %v", err)
	}
	if err := db.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	rep, err := CompactFile(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d → %d bytes for %d events", rep.Before, rep.After, len(keep))
	if len(keep) != 1000 || rep.After*4 > rep.Before {
		t.Fatalf("kept %d events; %d → %d bytes, want at most a quarter", len(keep), rep.Before, rep.After)
	}
	if chk, err := CheckFile(path); err != nil || len(chk.Problems) > 0 || chk.Events != 1000 {
		t.Fatalf("check after compaction: %+v %v", chk, err)
	}
	db, err = Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close(context.Background())
	db.View(func(tx *Tx) error {
		for _, k := range keep {
			if _, err := tx.Record(k); err != nil {
				t.Fatalf("record %s after compaction: %v", k, err)
			}
		}
		return nil
	})
	if _, err := os.Stat(path + ".compacting"); !os.IsNotExist(err) {
		t.Fatalf("the copy was left behind: %v", err)
	}
}

// A file with nothing to give back (the backup of a fresh router, 36 KiB:
// bbolt grows a new file in steps of its mapping, so a copy comes out
// larger) is left as it was, and the report says so instead of a negative
// saving.
func TestCompactKeepsAFileItCannotShrink(t *testing.T) {
	dir := t.TempDir()
	db, err := Open(filepath.Join(dir, "router.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "backup.db")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Backup(f, func(int64) {}); err != nil {
		t.Fatal(err)
	}
	if err := errors.Join(f.Close(), db.Close(context.Background())); err != nil {
		t.Fatal(err)
	}
	before, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := CompactFile(path)
	if err != nil {
		t.Fatal(err)
	}
	after, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Kept || rep.After != rep.Before || !os.SameFile(before, after) || after.Size() != before.Size() {
		t.Fatalf("report %+v; file %d → %d bytes, same file %v", rep, before.Size(), after.Size(), os.SameFile(before, after))
	}
	if _, err := os.Stat(path + ".compacting"); !os.IsNotExist(err) {
		t.Fatalf("the copy was left behind: %v", err)
	}
}

// A second router on the same data file fails within a second (bbolt's lock
// timeout) and says why, instead of a bare "timeout".
func TestOpenSaysWhoHoldsTheLock(t *testing.T) {
	path := filepath.Join(t.TempDir(), "router.db")
	db, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close(context.Background())
	if _, err := Open(path, Options{}); err == nil || !strings.Contains(err.Error(), "is open in another process (a running router, or router db compact, check, clock or rollback): stop it first") {
		t.Fatalf("second open: %v", err)
	}
}

// A file that is not a data file (random bytes, a few bytes of text) is
// refused by Open and reported by CheckFile in words that say so, and is
// left as it was.
func TestOpenSaysWhatIsNotADataFile(t *testing.T) {
	noise := make([]byte, 4096)
	for i := range noise {
		noise[i] = byte(i*7919 + i>>3)
	}
	for name, content := range map[string][]byte{"noise": noise, "text": []byte("hello")} {
		path := filepath.Join(t.TempDir(), "router.db")
		if err := os.WriteFile(path, content, 0o600); err != nil {
			t.Fatal(err)
		}
		const want = "not a data file bbolt can open"
		if _, err := Open(path, Options{}); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: Open: %v, want %q", name, err, want)
		}
		rep, err := CheckFile(path)
		if err != nil || len(rep.Problems) != 1 || !strings.Contains(rep.Problems[0], want) {
			t.Errorf("%s: CheckFile: %+v %v", name, rep, err)
		}
		if after, _ := os.ReadFile(path); string(after) != string(content) {
			t.Errorf("%s: the file was changed", name)
		}
	}
	// An empty file: CheckFile says so, rather than "write: bad file
	// descriptor" from bbolt setting it up read-only (an adversarial
	// trial), and leaves it empty. It says what Open says too: the router
	// refuses it (it said the router made a new data file of it).
	path := filepath.Join(t.TempDir(), "router.db")
	os.WriteFile(path, nil, 0o600)
	rep, err := CheckFile(path)
	if err != nil || len(rep.Problems) != 1 || !strings.Contains(rep.Problems[0], "the file is empty") || !strings.Contains(rep.Problems[0], "refuses to start on it") {
		t.Errorf("empty: CheckFile: %+v %v", rep, err)
	}
	if fi, _ := os.Stat(path); fi.Size() != 0 {
		t.Errorf("empty: the file was changed")
	}
}

// Close does not wait out a commit delay, nor a write's own wait (Later): a
// write already queued when Close comes (put in the queue here as Update
// does) is committed at once.
func TestCloseCutsTheCommitDelay(t *testing.T) {
	db, err := Open(filepath.Join(t.TempDir(), "router.db"), Options{CommitDelay: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	w := &write{err: make(chan error, 1), later: later{wait: 5 * time.Second}, fn: func(tx *Tx) error {
		r := &Record{Event: switchyard.Event{ID: "queued", Type: "a", Source: "/t", SpecVersion: "1.0"}, CreatedAt: time.Unix(1, 0)}
		return tx.InsertEvent(r, false)
	}}
	db.writes <- w
	start := time.Now()
	if err := db.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := <-w.err; err != nil {
		t.Fatalf("the queued write: %v", err)
	}
	if took := time.Since(start); took > 2500*time.Millisecond {
		t.Fatalf("Close took %v: it waited out the 5 s commit delay or the write's wait (Later)", took)
	}
}

// A compaction that fails (here: the copy cannot be created, a directory
// is in its place) says so and leaves the original as it was. Until
// session 11 such a failure was reported as success.
func TestCompactFailureLeavesTheFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "router.db")
	db, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(path+".compacting", "in-the-way"), 0o755); err != nil {
		t.Fatal(err)
	}
	before, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if rep, err := CompactFile(path); err == nil {
		t.Fatalf("compaction with its copy's path taken: no error, report %+v", rep)
	}
	after, err := os.Stat(path)
	if err != nil || !os.SameFile(before, after) || after.Size() != before.Size() {
		t.Fatalf("the original changed: %v", err)
	}
}

// On a disk with no room for the compacted copy, router db compact gives
// up the data file's reserve (the router makes it again once the disk has
// room) and compacts in its room: the operator of a full disk runs it to
// get space back, and before, it failed with ENOSPC beside the 2 MiB the
// router held for such a moment.
func TestCompactOnAFullDiskTakesTheReserve(t *testing.T) {
	dir := testkit.SmallDisk(t, 24<<20)
	path := filepath.Join(dir, "router.db")
	db, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	insertBatches(t, db, 8_000)
	deliverAndExpire(t, db, 7_500)
	if _, err := db.HoldReserve(2 << 20); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	testkit.FillDisk(t, dir)
	rep, err := CompactFile(path)
	if err != nil {
		t.Fatalf("compact on the full disk: %v", err)
	}
	t.Logf("%d → %d bytes", rep.Before, rep.After)
	if !rep.ReserveRemoved || rep.Kept || rep.After*2 > rep.Before {
		t.Fatalf("%+v: want the reserve removed and the file at most half its size", rep)
	}
	if _, err := os.Stat(reservePath(path)); !os.IsNotExist(err) {
		t.Fatalf("the reserve: %v, want it removed", err)
	}
	if chk, err := CheckFile(path); err != nil || len(chk.Problems) > 0 || chk.Events != 500 {
		t.Fatalf("check after compaction: %+v %v", chk, err)
	}
}

// The offline tools and the router refuse a folder named as the data file
// in those words: bbolt opened it read-only and called it "invalid
// database" (`router db check data`, a new user's trial).
func TestAFolderIsNotADataFile(t *testing.T) {
	dir := t.TempDir()
	want := dir + " is not a regular file (a folder): name a data file"
	_, checkErr := CheckFile(dir)
	_, compactErr := CompactFile(dir)
	_, clockErr := ReadClock(dir)
	for name, err := range map[string]error{"check": checkErr, "compact": compactErr, "clock": clockErr} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", name, err, want)
		}
	}
}
