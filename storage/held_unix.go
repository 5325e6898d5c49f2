//go:build unix

package storage

import (
	"errors"
	"os"
	"syscall"
)

// heldByAnother says whether another process holds a lock on the file at
// path, as bbolt locks a file it has open (flock): a compaction's copy
// that another `router db compact` is still writing.
func heldByAnother(path string) bool {
	f, err := os.Open(path)
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
