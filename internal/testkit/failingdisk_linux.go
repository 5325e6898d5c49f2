package testkit

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// FailingDisk is an ext4 filesystem of its own (an image on a loop
// device) mounted with errors=remount-ro, as the SD card of a Raspberry Pi
// and most Linux root filesystems are. Fail makes the kernel take it for
// damaged, as after an I/O error: it turns read-only at once, open files
// included, and every write fails with EROFS. Repair is what an operator
// does then: unmount, e2fsck, mount writable again at the same folder.
type FailingDisk struct {
	t   testing.TB
	Dir string
	img string
}

// NewFailingDisk mounts a FailingDisk of size bytes on a new folder; it
// is unmounted when the test ends. It takes root, loop devices and
// mkfs.ext4 (e2fsprogs): without them the test is skipped, saying so.
func NewFailingDisk(t testing.TB, size int64) *FailingDisk {
	t.Helper()
	for _, tool := range []string{"mkfs.ext4", "e2fsck", "mount", "umount", "losetup"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs a disk that can fail: %s is not installed (e2fsprogs, util-linux)", tool)
		}
	}
	dir := t.TempDir()
	d := &FailingDisk{t: t, Dir: filepath.Join(dir, "mnt"), img: filepath.Join(dir, "disk.img")}
	if err := os.Mkdir(d.Dir, 0o700); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(d.img)
	if err == nil {
		err = f.Truncate(size)
		f.Close()
	}
	if err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mkfs.ext4", "-q", "-F", d.img).CombinedOutput(); err != nil {
		t.Fatalf("mkfs.ext4: %v: %s", err, out)
	}
	if out, err := d.mount(); err != nil {
		t.Skipf("needs a disk that can fail: mounting an ext4 image on a loop device takes root: %v: %s", err, out)
	}
	t.Cleanup(func() { exec.Command("umount", "-l", d.Dir).Run() })
	if trigger, err := d.trigger(); err != nil || syscall.Access(trigger, 2) != nil { // W_OK
		t.Skipf("needs a disk that can fail: ext4's trigger_fs_error is not writable here (%s, %v)", trigger, err)
	}
	return d
}

// trigger is the file that makes the kernel report an error in the disk's
// filesystem (ext4's trigger_fs_error, made for tests).
func (d *FailingDisk) trigger() (string, error) {
	out, err := exec.Command("losetup", "-j", d.img).Output()
	dev, _, ok := strings.Cut(string(out), ":")
	if err != nil || !ok {
		return "", fmt.Errorf("the loop device of %s: %v (%q)", d.img, err, out)
	}
	return filepath.Join("/sys/fs/ext4", filepath.Base(dev), "trigger_fs_error"), nil
}

func (d *FailingDisk) mount() ([]byte, error) {
	return exec.Command("mount", "-o", "loop,errors=remount-ro", d.img, d.Dir).CombinedOutput()
}

// Fail has the kernel report an error in the filesystem: it turns
// read-only. It returns what went wrong rather than failing the test, so
// that a test may call it from a goroutine of its own.
func (d *FailingDisk) Fail() error {
	trigger, err := d.trigger()
	if err == nil {
		err = os.WriteFile(trigger, []byte("1"), 0)
	}
	if err != nil {
		return fmt.Errorf("make the disk fail: %w", err)
	}
	return nil
}

// Repair unmounts the disk, checks and mends it with e2fsck, and mounts it
// writable again. Nothing may have a file of it open.
func (d *FailingDisk) Repair() {
	d.t.Helper()
	if out, err := exec.Command("umount", d.Dir).CombinedOutput(); err != nil {
		d.t.Fatalf("unmount %s: %v: %s", d.Dir, err, out)
	}
	// Exit 1: errors found and corrected (the one Fail made). Anything
	// else (2 and up: a reboot needed, or not corrected; -1: killed) is a
	// disk not repaired.
	if out, err := exec.Command("e2fsck", "-f", "-y", d.img).CombinedOutput(); err != nil {
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 {
			d.t.Fatalf("e2fsck: %v: %s", err, out)
		}
	}
	if out, err := d.mount(); err != nil {
		d.t.Fatalf("mount %s again: %v: %s", d.Dir, err, out)
	}
}
