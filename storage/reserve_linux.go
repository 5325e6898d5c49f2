package storage

import (
	"errors"
	"os"
	"syscall"
)

// allocate gives f size bytes of the disk: fallocate, or writing them
// where the filesystem has no fallocate.
func allocate(f *os.File, size int64) error {
	err := syscall.Fallocate(int(f.Fd()), 0, 0, size)
	if errors.Is(err, syscall.EOPNOTSUPP) || errors.Is(err, syscall.ENOSYS) {
		return writeReserve(f, size)
	}
	return err
}
