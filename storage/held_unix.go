//go:build unix

package storage

import (
	"errors"
	"os"
	"syscall"
)

// heldByAnother says whether another process holds a lock on the regular
// file at path, as bbolt locks a file it has open (flock): a compaction's
// copy that another `router db compact` is still writing. Anything else
// there (a link, a FIFO) is not opened: a FIFO's open waited for a writer
// for ever (a review).
func heldByAnother(path string) bool {
	if fi, err := os.Lstat(path); err != nil || !fi.Mode().IsRegular() {
		return false
	}
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return false
	}
	defer f.Close()
	err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
	if err == nil {
		syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
	}
	return errors.Is(err, syscall.EWOULDBLOCK)
}

// lockFile takes (or converts to) an exclusive or shared lock on f, the
// one bbolt takes on a file it opens to write or to read; it fails at once
// when another process holds one that conflicts.
func lockFile(f *os.File, exclusive bool) error {
	how := syscall.LOCK_SH
	if exclusive {
		how = syscall.LOCK_EX
	}
	err := syscall.Flock(int(f.Fd()), how|syscall.LOCK_NB)
	if errors.Is(err, syscall.EWOULDBLOCK) {
		return &heldError{f.Name()}
	}
	return err
}
