//go:build !linux

package testkit

import (
	"syscall"
	"testing"
)

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
