package storage

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"

	bolt "go.etcd.io/bbolt"
)

// CheckReport is what CheckFile found.
type CheckReport struct {
	Path  string `json:"path"`
	Bytes int64  `json:"bytes"`
	// Schema is the data file's schema ("" when it has none: made by a
	// router that never finished opening it); this router writes
	// SchemaVersion.
	Schema   string   `json:"schema"`
	Events   int      `json:"events"`
	Problems []string `json:"problems"` // empty: the file is consistent
}

// maxProblems bounds a report: a badly damaged file has a problem a page.
const maxProblems = 100

// CheckFile checks a data file that no router has open (`router db
// check`): that it is not truncated, that bbolt opens it (its meta pages),
// that its pages hold together as bbolt's own check requires and every
// stored record decodes under its own key (walkPages, one read of each
// page, checkRecord), and its schema. It opens the file read-only and
// changes nothing.
func CheckFile(path string) (*CheckReport, error) {
	fi, err := statDataFile(path)
	if err != nil {
		return nil, err
	}
	rep := &CheckReport{Path: path, Bytes: fi.Size(), Problems: []string{}}
	if fi.Size() == 0 {
		// bbolt would set an empty file up as a new database, which a
		// read-only open cannot (it failed with "bad file descriptor").
		rep.Problems = append(rep.Problems, "the file is empty: not a data file (no router leaves one so, and the router refuses to start on it: restore it from a backup, or remove it to start empty)")
		return rep, nil
	}
	bdb, err := openBolt(path, readOnly())
	if errors.Is(err, bolt.ErrTimeout) {
		return nil, fmt.Errorf("%w; or check a backup of it (router backup)", err)
	}
	if err != nil {
		rep.Problems = append(rep.Problems, problemOf(err))
		return rep, nil
	}
	defer bdb.Close()
	readable := false
	err = faultSafe(func() error {
		return bdb.View(func(tx *bolt.Tx) error {
			readable = checkSchema(tx, rep)
			return nil
		})
	})
	if err != nil {
		rep.Problems = append(rep.Problems, problemOf(err))
		return rep, nil
	}
	var leaf func(in string, k, v []byte)
	if readable { // a newer schema's records are not ours to read
		leaf = rep.checkRecord
	}
	if err := walkPages(path, leaf); err != nil {
		rep.Problems = append(rep.Problems, "its pages do not hold together: "+err.Error())
	}
	return rep, nil
}

// add notes problem p, up to maxProblems.
func (rep *CheckReport) add(p string) {
	if p != "" && len(rep.Problems) < maxProblems {
		rep.Problems = append(rep.Problems, p)
	}
}

// checkRecord is CheckFile's part for what the router stores, given each
// key and value of each bucket (in): every event record under its own key,
// every idempotency record.
func (rep *CheckReport) checkRecord(in string, k, v []byte) {
	switch in {
	case "/" + string(bucketEvents):
		rep.Events++
		rep.add(recordProblem(k, v))
	case "/" + string(bucketIdem):
		if _, err := decodeIdem(v); err != nil {
			rep.add(fmt.Sprintf("idempotency record %q: %v", k, err))
		}
	}
}

// checkSchema is CheckFile's part for the file as a whole: an events
// bucket, and a schema this router reads; it says whether the records are
// this router's to read.
func checkSchema(tx *bolt.Tx, rep *CheckReport) bool {
	if tx.Bucket(bucketEvents) == nil {
		rep.add("no events bucket: not a Switchyard data file")
		return false
	}
	if meta := tx.Bucket(bucketMeta); meta != nil {
		rep.Schema = string(meta.Get(keySchema))
		if err := unreadableSchema(meta); err != nil {
			rep.add(err.Error())
			return false
		}
	}
	return true
}

// recordProblem is what is wrong with the record v stored under key k: it
// does not decode, or it is another event's (a damaged key: the event
// cannot be read by its id, and a compaction would copy it so). A tenant's
// event stored under its bare id is its own: a router before events were
// scoped by tenant stored them so (docs/decisions/tenant-scope.md).
func recordProblem(k, v []byte) string {
	r, err := decodeRecord(v)
	switch {
	case err != nil:
		return fmt.Sprintf("event %q: %v", k, err)
	case r.Key() != string(k) && !(r.Queue == "" && r.Event.ID == string(k)):
		return fmt.Sprintf("event %q is stored under the key %q: its key is damaged", r.Key(), k)
	}
	return ""
}

// Backup writes a consistent copy of the whole data file to w while the
// router runs: one read transaction's view (bbolt's Tx.WriteTo), so writers
// go on meanwhile and the copy holds exactly what was committed when it
// began. size, if set, learns the copy's size before it is written (an
// HTTP Content-Length). It returns the bytes written.
// A backup a refused sync overtakes ends with ErrBackupOvertaken rather
// than hold the writer, which waits for the reads begun before such a
// commit (readers): for as long as a slow client takes to read it.
func (db *DB) Backup(w io.Writer, size func(int64)) (int64, error) {
	gen := db.readers.enter() // the view's own generation, or an older one
	defer db.readers.leave(gen)
	var n int64
	o := &overtakable{w: w, readers: &db.readers, gen: gen}
	err := db.view(func(tx *bolt.Tx) error {
		if size != nil {
			size(tx.Size())
		}
		var err error
		n, err = tx.WriteTo(o)
		return err
	})
	if o.overtaken {
		err = ErrBackupOvertaken // bbolt keeps only its text
	}
	return n, err
}

// ErrBackupOvertaken ends a backup during which the disk refused a sync
// after a commit: the copy is given up, and may be made again at once.
var ErrBackupOvertaken = errors.New("the disk refused a sync while the backup was read (docs/decisions/disk-full.md): it is given up; make it again")

// overtakable is a backup's writer: each write fails once a generation of
// reads has begun after the backup's (readers.waitOlder waits for it).
type overtakable struct {
	w         io.Writer
	readers   *readers
	gen       uint64
	overtaken bool
}

func (o *overtakable) Write(p []byte) (int, error) {
	if o.readers.current() != o.gen {
		o.overtaken = true
		return 0, ErrBackupOvertaken
	}
	return o.w.Write(p)
}

// Space is how much room the data file takes and has.
type Space struct {
	// Used is the bytes of the pages that hold data: the file's
	// high-water mark less its free pages (which new writes reuse).
	Used int64 `json:"used_bytes"`
	// File is the data file's size on disk (bbolt grows it ahead of use
	// and never shrinks it).
	File int64 `json:"file_bytes"`
	// DiskFree is what the filesystem holding the file has left for
	// unprivileged writes.
	DiskFree int64 `json:"disk_free_bytes"`
	// Reusable is the room inside the file that new writes take without
	// any more of the disk: the bytes the filesystem has allocated to the
	// file, less those in use. bbolt never gives its free pages back to
	// the disk, so the room a drained backlog leaves is here, not in
	// DiskFree. (On a copy-on-write filesystem, btrfs or ZFS, a rewritten
	// page takes new blocks: there this overstates the room.)
	Reusable int64 `json:"reusable_bytes"`
	// Reserve is the disk the reserve beside the file holds for the moment
	// the disk is full (reserve.go): room only the router can use.
	Reserve int64 `json:"reserve_bytes"`
}

// Room is what the data file can still take: the disk's free bytes, the
// file's reusable ones, and the reserve's.
func (sp Space) Room() int64 { return sp.DiskFree + sp.Reusable + sp.Reserve }

// Space measures the data file's use and the room left on its disk.
func (db *DB) Space() (Space, error) {
	db.checkPlace()
	var sp Space
	var err error
	if sp.Used, err = db.pagesInUse(); err != nil {
		return sp, err
	}
	db.used.Store(sp.Used)
	sp.File = db.Size()
	if fi, err := os.Stat(db.path); err == nil {
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			sp.Reusable = max(0, int64(st.Blocks)*512-sp.Used)
		}
	}
	var fs syscall.Statfs_t
	if err := syscall.Statfs(filepath.Dir(db.path), &fs); err != nil {
		return sp, err
	}
	sp.DiskFree = int64(fs.Bavail) * int64(fs.Bsize)
	sp.Reserve = reserveHeld(reservePath(db.path))
	return sp, nil
}
