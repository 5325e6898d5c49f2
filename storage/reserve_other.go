//go:build !linux

package storage

import "os"

// allocate gives f size bytes of the disk by writing them.
func allocate(f *os.File, size int64) error { return writeReserve(f, size) }
