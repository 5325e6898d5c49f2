//go:build !linux

package testkit

import (
	"syscall"
	"testing"
)

// SyncFaultDisk is a folder whose files' syncs can be refused, on Linux
// (syncfault_linux.go): elsewhere the test is skipped.
type SyncFaultDisk struct{ Dir string }

// NewSyncFaultDisk skips the test: it needs Linux's FUSE.
func NewSyncFaultDisk(t testing.TB) *SyncFaultDisk {
	t.Skip("testkit.NewSyncFaultDisk needs Linux (a FUSE filesystem)")
	return nil
}

// FailSync goes with NewSyncFaultDisk.
func (d *SyncFaultDisk) FailSync(errno syscall.Errno, below int64) {}

// SyncsFailed goes with NewSyncFaultDisk.
func (d *SyncFaultDisk) SyncsFailed() int64 { return 0 }
