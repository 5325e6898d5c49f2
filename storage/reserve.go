package storage

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"strings"
	"syscall"

	"github.com/switchyard-router/switchyard/internal/fsperm"
)

// The reserve is a file beside the data file (its path with ".reserve")
// whose disk space the router holds for the moment the disk is full
// (docs/decisions/disk-full.md). bbolt writes every change to new pages,
// a removal included: on a disk with no free block and a file with no free
// page, nothing can be written, not even the cleanup that would make room.
// When a commit finds the disk full, the writer removes the reserve and
// commits the group again; the engine makes the reserve anew once the disk
// has room (HoldReserve). Space counts the reserve's bytes as room, so
// storage.min_free means what it says whether the reserve is held or not.

// reservePath is where the reserve of the data file at path lives.
func reservePath(path string) string { return path + ".reserve" }

// HoldReserve makes the reserve size bytes of the disk (0: removes it),
// unless it is that size already, and reports whether it made it. A
// reserve the filesystem cannot hold whole is removed, and the error says
// why.
func (db *DB) HoldReserve(size int64) (made bool, err error) {
	db.reserveMu.Lock()
	defer db.reserveMu.Unlock()
	path := reservePath(db.path)
	if size <= 0 {
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return false, fmt.Errorf("storage: remove the reserve: %w", err)
		}
		return false, nil
	}
	// Another user's file there (a sticky folder) is no reserve of ours: a
	// sparse one of the right size passed for one before (a security
	// trial), the reserve 0 and nothing said.
	if err := fsperm.CheckMade(path); err != nil {
		return false, fmt.Errorf("storage: the reserve: %w", err)
	}
	if fi, err := os.Lstat(path); err == nil && fi.Mode().IsRegular() && fi.Size() == size {
		return false, nil // its blocks as the filesystem counts them (Space.Reserve) may differ
	}
	if err := makeReserve(path, size); err != nil {
		os.Remove(path)
		return false, fmt.Errorf("storage: hold a reserve of %d bytes at %s: %w", size, path, err)
	}
	return true, nil
}

// releaseReserve removes the reserve to make room for a commit the full
// disk refused; it reports whether there was one to remove.
func (db *DB) releaseReserve() bool {
	db.reserveMu.Lock()
	defer db.reserveMu.Unlock()
	if !removeReserve(db.path) {
		return false
	}
	db.released.Add(1)
	return true
}

// removeReserve removes the reserve of the data file at path, and reports
// whether there was one.
func removeReserve(path string) bool {
	reserve := reservePath(path)
	if _, err := os.Lstat(reserve); err != nil || os.Remove(reserve) != nil {
		return false
	}
	return true
}

// ReserveReleased is how many times a full disk made the writer give up
// the reserve since the file was opened.
func (db *DB) ReserveReleased() uint64 { return db.released.Load() }

// reserveHeld is the bytes of the disk the reserve at path holds (0: none).
func reserveHeld(path string) int64 {
	fi, err := os.Lstat(path)
	if err != nil || !fi.Mode().IsRegular() {
		return 0
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return min(fi.Size(), int64(st.Blocks)*512)
	}
	return fi.Size()
}

// makeReserve writes a new reserve of size bytes at path, its blocks
// allocated (a sparse file would hold nothing), and synced.
func makeReserve(path string, size int64) error {
	if err := createExcl(path); err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return err
	}
	err = allocate(f, size)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// writeReserve allocates size bytes of f by writing them, where the
// filesystem cannot allocate without writing.
func writeReserve(f *os.File, size int64) error {
	buf := make([]byte, 1<<20)
	rnd := rand.New(rand.NewPCG(1, 2)) // not zeros: a compressing filesystem would store nothing
	for i := 0; i < len(buf); i += 8 {
		binary.LittleEndian.PutUint64(buf[i:], rnd.Uint64())
	}
	for left := size; left > 0; {
		n, err := f.Write(buf[:min(left, int64(len(buf)))])
		if err != nil {
			return err
		}
		left -= int64(n)
	}
	return nil
}

// IsDiskFull reports whether err is the filesystem saying it has no room
// (a commit the full disk refused): no free block (ENOSPC), or none left
// in the quota of the file's user or project (EDQUOT: ext4 says it for
// project quotas, whose limit statfs also reports, and so min_free sees).
// bbolt keeps only the text of the errors of its file's growth ("file
// resize error: truncate ...: no space left on device", formatted with
// %s): a filesystem that allocates what a truncate adds (exFAT and FAT32,
// an SD card's, or a quota on files' sizes) refuses the commit there, so
// the text counts too. A lost file, or a commit applied and unconfirmed
// (whose text may name ENOSPC), is not a full disk: neither is tried again.
func IsDiskFull(err error) bool {
	if err == nil || errors.Is(err, ErrFileLost) || errors.Is(err, ErrUnconfirmed) {
		return false // not a commit to try again: lost, or applied
	}
	if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) {
		return true
	}
	text := err.Error()
	return strings.Contains(text, syscall.ENOSPC.Error()) || strings.Contains(text, syscall.EDQUOT.Error())
}
