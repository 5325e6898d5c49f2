package storage

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"math/big"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"

	"github.com/switchyard-router/switchyard/internal/fsperm"
)

// bbolt's file layout, as far as checkSize reads it: two meta pages at the
// start of the file, each a 16-byte page header followed by the meta
// (go.etcd.io/bbolt/internal/common/meta.go), in the machine's byte order
// (little-endian on every platform Switchyard is built for).
const (
	boltMagic      = 0xED0CDAED
	boltVersion    = 2
	pageHeaderSize = 16
	metaSumLen     = 56 // the meta's bytes before its checksum

	// Where the meta's fields lie from its start (after the page header):
	// magic u32 at 0, version u32 at 4, then these, the checksum at
	// metaSumLen (storeFreeList writes the last three).
	metaPageSizeAt  = 8
	metaRootAt      = 16 // the root bucket's page; its sequence follows
	metaFreeListAt  = 32
	metaHighWaterAt = 40
	metaTxIDAt      = 48
)

// readMeta decodes the meta at off; ok is false when it is not a valid one
// (magic, version, checksum).
func readMeta(f *os.File, off int64) (m Meta, ok bool) {
	buf := make([]byte, pageHeaderSize+metaSumLen+8)
	if _, err := f.ReadAt(buf, off); err != nil {
		return m, false
	}
	d := decodeMeta(buf)
	return d, d.Valid
}

// Meta is what one of a data file's two meta pages says, valid or not:
// what the checks (checkSize, walkPages) and rollback read, and what a tool
// or a test that describes a damaged file shows.
type Meta struct {
	Valid     bool // magic, version and checksum right
	PageSize  uint32
	Root      uint64 // the root bucket's page
	FreeList  uint64
	HighWater uint64 // pages in use: the file holds at least HighWater × PageSize bytes
	TxID      uint64
}

func (m Meta) String() string {
	return fmt.Sprintf("txid %d, root page %d, free list page %d, high water page %d, valid %v", m.TxID, m.Root, m.FreeList, m.HighWater, m.Valid)
}

// decodeMeta decodes a meta page's first bytes (its header and meta).
func decodeMeta(page []byte) Meta {
	meta := page[pageHeaderSize:]
	le := binary.LittleEndian
	return Meta{
		Valid:    le.Uint32(meta[0:]) == boltMagic && le.Uint32(meta[4:]) == boltVersion && le.Uint64(meta[metaSumLen:]) == metaChecksum(meta),
		PageSize: le.Uint32(meta[metaPageSizeAt:]), Root: le.Uint64(meta[metaRootAt:]), FreeList: le.Uint64(meta[metaFreeListAt:]),
		HighWater: le.Uint64(meta[metaHighWaterAt:]), TxID: le.Uint64(meta[metaTxIDAt:]),
	}
}

// metaChecksum is the checksum bbolt keeps of a meta (from its start):
// the FNV-64a of its bytes before it.
func metaChecksum(meta []byte) uint64 {
	h := fnv.New64a()
	h.Write(meta[:metaSumLen])
	return h.Sum64()
}

// Metas reads the two meta pages of the data file at path, valid or not
// (the second where secondMetaAt finds it), and the file's size.
func Metas(path string) (metas [2]Meta, size int64, err error) {
	f, err := os.Open(path)
	if err != nil {
		return metas, 0, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return metas, 0, err
	}
	off := int64(0)
	for i := range metas {
		buf := make([]byte, pageHeaderSize+metaSumLen+8)
		if _, err := f.ReadAt(buf, off); err != nil {
			return metas, fi.Size(), fmt.Errorf("%d bytes: no meta page %d: %w", fi.Size(), i, err)
		}
		metas[i] = decodeMeta(buf)
		off = secondMetaAt(f, metas[0])
	}
	return metas, fi.Size(), nil
}

// secondMetaAt is where f's second meta page lies, as bbolt finds it: one
// page in, by the first meta's page size; with the first damaged, the first
// of 1 KiB, 2 KiB, ... 16 MiB that holds a valid meta (a file made where
// pages are 16 or 64 KiB: read at this system's page size alone, the check
// found no meta and walked nothing, a review); else this system's page
// size.
func secondMetaAt(f *os.File, m0 Meta) int64 {
	if m0.Valid && m0.PageSize >= pageHeaderSize+metaSumLen+8 {
		return int64(m0.PageSize)
	}
	for i := range 15 {
		if _, ok := readMeta(f, 1024<<i); ok {
			return 1024 << i
		}
	}
	return int64(os.Getpagesize())
}

// currentMeta is the meta bbolt opens f by: the valid one of the two with
// the later transaction; false when neither is valid.
func currentMeta(f *os.File) (Meta, bool) {
	m, _, ok := currentMetaAt(f)
	return m, ok
}

// currentMetaAt is currentMeta, and where in the file it lies.
func currentMetaAt(f *os.File) (m Meta, off int64, ok bool) {
	m0, ok0 := readMeta(f, 0)
	second := secondMetaAt(f, m0)
	m1, ok1 := readMeta(f, second)
	switch {
	case ok0 && ok1 && m1.TxID > m0.TxID, !ok0 && ok1:
		return m1, second, true
	}
	return m0, 0, ok0
}

// statDataFile stats the data file at path for an offline tool, and
// refuses a folder or a device (`router db check data`: bbolt called it
// "invalid database").
func statDataFile(path string) (os.FileInfo, error) {
	fi, err := os.Stat(path)
	if err == nil {
		err = notRegular(path, fi)
	}
	return fi, err
}

// notRegular refuses what is not a regular file (a folder, a device) at
// path where a data file is expected: router run's storage.path
// (CheckPath) and the offline tools.
func notRegular(path string, fi os.FileInfo) error {
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%s is not a regular file (%s): name a data file, as storage.path does (./data/router.db by default)", path, fsperm.Kind(fi))
	}
	return nil
}

// notALink refuses a data file named through a symbolic link, for router
// run (CheckPath: whoever may change the link, or make it dangle for the
// router to create the file where it points, chooses where the data goes)
// and router db compact (the rename would put the compacted copy in the
// link's place and leave the file it names as it was, nothing freed).
func notALink(path string) error {
	fi, err := os.Lstat(path)
	if err != nil || fi.Mode()&os.ModeSymlink == 0 {
		return err
	}
	target, _ := filepath.EvalSymlinks(path)
	return fmt.Errorf("%s is a symbolic link (to %s): name the data file itself", path, target)
}

// checkSize refuses a data file shorter than its own metadata says it is,
// or empty: a truncated file (a copy cut short, a full disk during a copy,
// a file cut under a running router). bbolt
// would map it and die with SIGBUS on the first page past the end; this
// says what is wrong instead, before anything reads or writes the file.
func checkSize(path string) error {
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return nil // a new data file
	}
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err == nil {
		err = notRegular(path, fi)
	}
	if err != nil {
		return err
	}
	if fi.Size() == 0 {
		return errEmpty
	}
	m, ok := currentMeta(f)
	if !ok {
		return nil // not a bbolt file, or both metas damaged: bbolt says which
	}
	// Divided, not multiplied: a meta's page count times its page size can
	// overflow (a review), and the walk sizes its set of pages by the count.
	if ps := uint64(m.PageSize); ps > 0 && m.HighWater > uint64(fi.Size())/ps {
		want := new(big.Int).Mul(new(big.Int).SetUint64(m.HighWater), new(big.Int).SetUint64(ps))
		return fmt.Errorf("the data file is truncated: it has %d bytes, but its metadata (transaction %d) says it holds %d pages of %d bytes, %d bytes; "+
			"the file was left as it is: %s",
			fi.Size(), m.TxID, m.HighWater, m.PageSize, want, DamageAdvice)
	}
	return nil
}

// errEmpty refuses an empty data file. A router never leaves one
// (createFile), so it was cut to nothing, or made by something else; bbolt
// would take it for a new file and start again empty.
var errEmpty = errors.New("the data file is empty (0 bytes): no router leaves one so; it was truncated, or made by something else; " +
	"the file was left as it is: restore it from a backup (router backup), or remove it to start empty")

// writable is how the router opens a data file to write it: the router's
// own, and the new files of createFile and compact. The freelist is not
// written on every commit: one page less to write per fsync. The open reads
// the one a clean stop stores (DB.Close), or the one inspect stores before
// it (walkAndStoreFreeList); bbolt rebuilds it from the tree only where
// neither could be. A large initial mapping (mmap) avoids remaps, which
// block readers.
func writable(mmap int) *bolt.Options {
	return &bolt.Options{
		Timeout:         time.Second, // another router holds the file: fail, don't hang
		NoFreelistSync:  true,
		FreelistType:    bolt.FreelistMapType,
		InitialMmapSize: mmap,
	}
}

// readOnly is how the router opens a data file only to read it: check,
// inspect, compact's source.
func readOnly() *bolt.Options { return &bolt.Options{ReadOnly: true, Timeout: time.Second} }

// openBolt opens the file with bbolt after checkSize.
func openBolt(path string, opts *bolt.Options) (db *bolt.DB, err error) {
	if err := checkSize(path); err != nil {
		return nil, err
	}
	before, _ := os.Stat(path)
	err = faultSafe(func() (err error) {
		db, err = bolt.Open(path, 0o600, opts)
		return err
	})
	if errors.Is(err, berrors.ErrTimeout) {
		return nil, lockHeld(path, err)
	}
	if errors.Is(err, berrors.ErrVersionMismatch) {
		return nil, fmt.Errorf("a bbolt file of another format version than this router's bbolt reads (a newer router's? keep the file, and run the router that wrote it): %w", err)
	}
	if notBolt(err) {
		return nil, fmt.Errorf("not a data file bbolt can open (another kind of file, or its first pages are damaged): %w", err)
	}
	if err == nil && before != nil {
		// bbolt opens the file, then waits for its lock: a file renamed
		// into place meanwhile (router db compact finishing) would leave
		// this process on the old, unlinked one, where nothing it writes
		// is kept.
		if after, serr := os.Stat(path); serr != nil || !os.SameFile(before, after) {
			db.Close()
			return nil, fmt.Errorf("%s was replaced while it was being opened (router db compact?): open it again", path)
		}
	}
	return db, err
}

// inspect looks at the file before Open opens it to write: its size
// (checkSize); when the last router on it did not stop cleanly (its
// running mark), the whole file through checkUnclean; then every page the
// tree reaches (walkAndStoreFreeList, as walkPages reads them), and, when
// the last commit stored no free list, it stores the one bbolt would walk
// the mapped file for. notStored is why that could not be done (the open
// is slower, nothing else).
//
// bbolt walks the same pages when it opens a file to write without a
// stored free list (after an unclean stop: a clean one stores it), on a
// goroutine of its own, checking what its Tx.Check does of them (reached
// once, a branch or a leaf, keys in order and in range): damage it meets
// it panics with there, and a memory fault inside its walk ends the
// process with a stack trace nothing can catch. So here, on this
// goroutine, each of those is an error first: walkPages reads every page
// and element from the file and checks the same
// (TestDamagedLeafAfterCleanStop). A stored free list it checks against
// the pages reached: bbolt would write over a page in use that the list
// named. The walk also took the place of a walk of every bucket's pages
// through bbolt (Bucket.Stats), which read the mapped file once more at
// every start: 8–24 s of a clean start's 22–46 s for a 477 MB file in a
// 128 MiB cgroup (docs/decisions/page-walk.md). After an unclean stop,
// where a torn write is likely, the whole check (Options.CheckUnclean;
// cmd/router runs it in a child process) comes first. A file
// that does not exist yet has nothing to inspect; one bbolt cannot open is
// left to the open that follows, which says why.
func inspect(path string, checkUnclean func(string) error) (notStored, err error) {
	if _, err := os.Stat(path); err != nil {
		return nil, nil
	}
	if err := checkSize(path); err != nil {
		return nil, err
	}
	var bdb *bolt.DB
	if err := faultSafe(func() (err error) {
		bdb, err = bolt.Open(path, 0o600, readOnly())
		return err
	}); err != nil {
		if errors.Is(err, berrors.ErrTimeout) {
			return nil, lockHeld(path, err) // a router holds it: say so now, not after a second wait
		}
		return nil, nil
	}
	unclean := false
	err = faultSafe(func() error {
		return bdb.View(func(tx *bolt.Tx) error {
			if meta := tx.Bucket(bucketMeta); meta != nil {
				unclean = meta.Get(keyRunning) != nil
			}
			return nil
		})
	})
	bdb.Close()
	if err == nil && unclean && checkUnclean != nil {
		err = checkUnclean(path)
	}
	if err != nil {
		return nil, err
	}
	return walkAndStoreFreeList(path)
}

// notBolt says whether err is bbolt refusing the file's contents, in
// words ("invalid database", "file size too small") that do not say what
// the file is.
func notBolt(err error) bool {
	return err != nil && (errors.Is(err, berrors.ErrInvalid) || errors.Is(err, berrors.ErrChecksum) ||
		strings.Contains(err.Error(), "file size too small"))
}

// lockHeld words bbolt's lock timeout on the file at path: another
// process has it open (a router, or router db compact, check or clock:
// one that writes it). Other errors pass as they are.
func lockHeld(path string, err error) error {
	if errors.Is(err, berrors.ErrTimeout) {
		return fmt.Errorf("%s (its lock is held: %w)", openElsewhere(path), err)
	}
	return err
}

// heldError is lockFile's: another process has the file at path open.
type heldError struct{ path string }

func (e *heldError) Error() string { return openElsewhere(e.path) }

// openElsewhere says that another process has the data file at path open.
func openElsewhere(path string) string {
	return path + " is open in another process (a running router, or router db compact, check, clock or rollback): stop it first"
}

// faultSafe runs fn, turning a memory fault while bbolt reads its mapping
// (a damaged file that passed checkSize) into an error: without
// SetPanicOnFault the Go runtime ends the process on SIGBUS. It guards what
// Open does on the caller's goroutine, where bbolt also panics when its
// walk of the pages for the free list finds damage inside one (a key out
// of order): TestDamagedLeafAfterCleanStop.
func faultSafe(fn func() error) (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			how := "reading it faulted"
			if _, fault := r.(runtime.Error); !fault {
				how = "bbolt's walk of its pages failed" // freepages: a key out of order, a page twice
			}
			err = damaged(how, r)
		}
	}()
	return fn()
}

// damaged says the data file is damaged, how (what found it, and what),
// and what to do.
func damaged(how string, what any) error { return &DamageError{How: how, What: what} }

// DamageError is a data file found damaged: how (what found it), and what.
// Its text says what to do (DamageAdvice); Problem is the damage alone,
// for a check's report, whose reader is told what to do once.
type DamageError struct {
	How  string
	What any
}

func (e *DamageError) Error() string {
	return e.Problem() + "; the file was left as it is: " + DamageAdvice
}

// Problem is the damage, without the advice.
func (e *DamageError) Problem() string {
	return fmt.Sprintf("the data file is damaged (%s: %v)", e.How, e.What)
}

// problemOf is err as a check reports it: a DamageError's damage alone.
func problemOf(err error) string {
	if d, ok := errors.AsType[*DamageError](err); ok {
		return d.Problem()
	}
	return err.Error()
}

// DamageAdvice is what to do with a data file found damaged: a torn last
// commit is what a disk that failed under a router leaves
// (docs/decisions/torn-commit.md).
const DamageAdvice = "check it with `router db check`; " +
	"if its disk failed while a router wrote it (I/O errors, a file system turned read-only), `router db rollback` on it sets it back to the commit before its last, when that one checks (what the last commit stored is lost); " +
	"else restore it from a backup (router backup), or move it away to start empty"
