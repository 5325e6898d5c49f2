package testkit

import (
	"fmt"
	"os"
	"syscall"
	"testing"
)

// SmallDisk mounts a filesystem of size bytes (a tmpfs) on a new folder and
// returns the folder; it is unmounted when the test ends. A disk that
// fills up is a real one: writes fail with ENOSPC, as on a full edge
// node. Mounting takes root (CAP_SYS_ADMIN): without it the test is
// skipped, saying so (.ci/run runs as root).
func SmallDisk(t testing.TB, size int64) string {
	t.Helper()
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, fmt.Sprintf("size=%d,mode=0700", size)); err != nil {
		t.Skipf("needs a small disk of its own: mounting a tmpfs takes root (CAP_SYS_ADMIN): %v", err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, syscall.MNT_DETACH); err != nil {
			t.Errorf("unmount the small disk %s: %v", dir, err)
		}
	})
	return dir
}

// GrowDisk makes the disk SmallDisk mounted on dir size bytes, as an
// operator grows a volume under a running program.
func GrowDisk(t testing.TB, dir string, size int64) {
	t.Helper()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", syscall.MS_REMOUNT, fmt.Sprintf("size=%d,mode=0700", size)); err != nil {
		t.Fatalf("grow the small disk %s: %v", dir, err)
	}
}

// FillDisk takes every free byte of the filesystem holding dir, as another
// program that fills the disk does, and returns the file that holds them:
// removing it gives them back. It takes them a MiB at a time, then a page
// at a time, until the disk refuses: the router writes meanwhile.
func FillDisk(t testing.TB, dir string) string {
	t.Helper()
	path := dir + "/filler"
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var off int64
	for _, step := range []int64{1 << 20, 4 << 10} {
		for {
			err := syscall.Fallocate(int(f.Fd()), 0, off, step)
			if err == syscall.ENOSPC {
				break
			}
			if err != nil {
				t.Fatalf("fill the disk at %s: %v", dir, err)
			}
			off += step
		}
	}
	return path
}
