//go:build !linux

package testkit

import (
	"math"
	"os"
	"syscall"
	"testing"
)

// MetaPages is FailSync's offset for the sync after a bbolt meta page.
var MetaPages = int64(2 * os.Getpagesize())

// AnySync is FailSync's offset for the next sync of any file.
const AnySync = int64(math.MaxInt64)

// FaultDisk is a folder whose files' syncs can be refused, on Linux
// (faultdisk_linux.go): elsewhere the test is skipped.
type FaultDisk struct{ Dir, Under string }

// NewFaultDisk skips the test: it needs Linux's FUSE.
func NewFaultDisk(t testing.TB) *FaultDisk {
	t.Skip("testkit.NewFaultDisk needs Linux (a FUSE filesystem)")
	return nil
}

// FailSync goes with NewFaultDisk.
func (d *FaultDisk) FailSync(errno syscall.Errno, below int64) {}

// SyncsFailed goes with NewFaultDisk.
func (d *FaultDisk) SyncsFailed() int64 { return 0 }

// Quota goes with NewFaultDisk.
func (d *FaultDisk) Quota(extra int64) {}

// QuotaRefusals goes with NewFaultDisk.
func (d *FaultDisk) QuotaRefusals() int64 { return 0 }

// Held goes with NewFaultDisk.
func (d *FaultDisk) Held(t testing.TB, name string) string { return "" }
