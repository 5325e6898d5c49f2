//go:build !linux

package testkit

import "testing"

// SmallDisk mounts a tmpfs on Linux (smalldisk_linux.go): elsewhere the
// test is skipped.
func SmallDisk(t testing.TB, size int64) string {
	t.Skip("testkit.SmallDisk needs Linux (a tmpfs mounted for the test)")
	return ""
}

// FillDisk goes with SmallDisk.
func FillDisk(t testing.TB, dir string) string {
	t.Skip("testkit.FillDisk needs Linux")
	return ""
}

// GrowDisk goes with SmallDisk.
func GrowDisk(t testing.TB, dir string, size int64) { t.Skip("testkit.GrowDisk needs Linux") }
