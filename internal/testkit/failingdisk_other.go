//go:build !linux

package testkit

import "testing"

// FailingDisk is an ext4 filesystem that turns read-only on Linux
// (failingdisk_linux.go): elsewhere the test is skipped.
type FailingDisk struct{ Dir string }

// NewFailingDisk skips the test: it needs Linux.
func NewFailingDisk(t testing.TB, size int64) *FailingDisk {
	t.Skip("testkit.NewFailingDisk needs Linux (ext4 on a loop device)")
	return nil
}

// Fail goes with NewFailingDisk.
func (d *FailingDisk) Fail() error { return nil }

// Repair goes with NewFailingDisk.
func (d *FailingDisk) Repair() {}
