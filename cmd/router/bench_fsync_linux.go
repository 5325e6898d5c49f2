package main

import (
	"os"
	"syscall"
)

// fdatasync flushes f's data (and the metadata needed to read it back),
// as bbolt does after each commit on Linux.
func fdatasync(f *os.File) error { return syscall.Fdatasync(int(f.Fd())) }
