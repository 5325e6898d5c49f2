// Command ext4flip measures whether Linux keeps what an fdatasync said it
// had written, when the ext4 filesystem under it turns read-only at that
// moment (errors=remount-ro after an error, made here with the kernel's
// trigger_fs_error). It writes the way bbolt commits: a new page at the
// end of the file (the file grown by ftruncate first, as bbolt grows it),
// a page rewritten, fdatasync, a "meta" page naming the new one, fdatasync;
// and counts a commit acknowledged once both syncs returned success. After
// the flip it unmounts, runs e2fsck -f -y (or not, -fsck=false), mounts
// again and reads every acknowledged page back. A commit acknowledged and
// then found zero is a sync that did not keep its word.
// docs/decisions/torn-commit.md has what it measured. Needs root,
// e2fsprogs and a kernel with ext4's trigger_fs_error.
//
//	go run ./.ci/probes/ext4flip -n 300
package main

import (
	"bytes"
	"encoding/binary"
	"flag"
	"fmt"
	"log"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

const page = 4096

func main() {
	n := flag.Int("n", 100, "flips")
	fsck := flag.Bool("fsck", true, "repair with e2fsck -f -y before the read back (else the kernel's journal replay alone)")
	dir := flag.String("dir", "", "work folder (default: a temporary one)")
	flag.Parse()
	if *dir == "" {
		d, err := os.MkdirTemp("", "ext4flip")
		if err != nil {
			log.Fatal(err)
		}
		defer os.RemoveAll(d)
		*dir = d
	}
	lost := 0
	for i := range *n {
		r, err := flip(*dir, *fsck)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("flip %d: %s\n", i, r)
		if r.lost != "" {
			lost++
		}
	}
	fmt.Printf("%d of %d flips lost an acknowledged commit\n", lost, *n)
}

// result is one flip's.
type result struct {
	acked  int    // commits acknowledged (both syncs succeeded)
	failed error  // what the first failing call returned
	lost   string // what the read back found wrong; "" none
}

func (r result) String() string {
	s := fmt.Sprintf("%d commits acknowledged, then %v", r.acked, r.failed)
	if r.lost != "" {
		s += ": LOST " + r.lost
	}
	return s
}

// flip makes a filesystem, commits until it fails under them, and reads
// back what was acknowledged.
func flip(dir string, fsck bool) (result, error) {
	img, mnt := filepath.Join(dir, "disk.img"), filepath.Join(dir, "mnt")
	if err := makeDisk(img, mnt); err != nil {
		return result{}, err
	}
	defer exec.Command("umount", mnt).Run()
	trigger, err := triggerOf(img)
	if err != nil {
		return result{}, err
	}
	path := filepath.Join(mnt, "data")
	fd, err := syscall.Open(path, syscall.O_RDWR|syscall.O_CREAT, 0o600)
	if err != nil {
		return result{}, err
	}
	var r result
	done := make(chan struct{})
	go func() { defer close(done); r.acked, r.failed = commit(fd) }()
	time.Sleep(time.Duration(200+rand.IntN(800)) * time.Millisecond)
	if err := os.WriteFile(trigger, []byte("1"), 0); err != nil {
		return r, err
	}
	<-done
	syscall.Close(fd)
	if out, err := exec.Command("umount", mnt).CombinedOutput(); err != nil {
		return r, fmt.Errorf("umount: %v: %s", err, out)
	}
	if fsck {
		if out, err := exec.Command("e2fsck", "-f", "-y", img).CombinedOutput(); err != nil {
			if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 {
				return r, fmt.Errorf("e2fsck: %v: %s", err, out)
			}
		}
	}
	if out, err := exec.Command("mount", "-o", "loop,errors=remount-ro", img, mnt).CombinedOutput(); err != nil {
		return r, fmt.Errorf("mount again: %v: %s", err, out)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return r, err
	}
	r.lost = readBack(b, r.acked)
	return r, nil
}

// makeDisk makes a 128 MiB ext4 image at img and mounts it at mnt.
func makeDisk(img, mnt string) error {
	os.Remove(img)
	if err := os.MkdirAll(mnt, 0o700); err != nil {
		return err
	}
	f, err := os.Create(img)
	if err == nil {
		err = f.Truncate(128 << 20)
		f.Close()
	}
	if err != nil {
		return err
	}
	for _, c := range [][]string{{"mkfs.ext4", "-q", "-F", img}, {"mount", "-o", "loop,errors=remount-ro", img, mnt}} {
		if out, err := exec.Command(c[0], c[1:]...).CombinedOutput(); err != nil {
			return fmt.Errorf("%s: %v: %s", c[0], err, out)
		}
	}
	return nil
}

// triggerOf is the trigger_fs_error file of img's loop device.
func triggerOf(img string) (string, error) {
	out, err := exec.Command("losetup", "-j", img).Output()
	dev, _, ok := strings.Cut(string(out), ":")
	if err != nil || !ok {
		return "", fmt.Errorf("the loop device of %s: %v (%q)", img, err, out)
	}
	return filepath.Join("/sys/fs/ext4", filepath.Base(dev), "trigger_fs_error"), nil
}

// commit writes commits i = 1, 2, ... until a call fails: page i, page
// i-5 again, fdatasync, page 0 naming i, fdatasync. It returns the last i
// whose syncs both succeeded, and the failure.
func commit(fd int) (acked int, err error) {
	size := int64(0)
	for i := 1; ; i++ {
		off := int64(i) * page
		if off+page > size { // grow ahead, as bbolt does
			size += 256 << 10
			if err = syscall.Ftruncate(fd, size); err == nil {
				err = syscall.Fsync(fd)
			}
			if err != nil {
				return acked, err
			}
		}
		if _, err = syscall.Pwrite(fd, pageOf(i), off); err == nil && i > 5 {
			_, err = syscall.Pwrite(fd, pageOf(i-5), int64(i-5)*page)
		}
		if err == nil {
			err = syscall.Fdatasync(fd)
		}
		if err == nil {
			meta := make([]byte, page)
			binary.LittleEndian.PutUint64(meta, uint64(i))
			_, err = syscall.Pwrite(fd, meta, 0)
		}
		if err == nil {
			err = syscall.Fdatasync(fd)
		}
		if err != nil {
			return acked, err
		}
		acked = i
	}
}

// pageOf is page i's bytes: i, then a byte of i's.
func pageOf(i int) []byte {
	b := bytes.Repeat([]byte{byte(i%250 + 1)}, page)
	binary.LittleEndian.PutUint64(b, uint64(i))
	return b
}

// readBack says what of the acked commits the file b lost.
func readBack(b []byte, acked int) string {
	var lost []string
	if len(b) < 8 || int(binary.LittleEndian.Uint64(b)) < acked {
		lost = append(lost, "the meta page names an earlier commit")
	}
	for i := 1; i <= acked; i++ {
		if len(b) < (i+1)*page {
			lost = append(lost, fmt.Sprintf("page %d past the end (%d bytes)", i, len(b)))
			break
		}
		if got := b[i*page : (i+1)*page]; !bytes.Equal(got, pageOf(i)) {
			what := "other bytes"
			if bytes.Count(got, []byte{0}) == page {
				what = "zeros"
			}
			lost = append(lost, fmt.Sprintf("page %d holds %s", i, what))
		}
	}
	return strings.Join(lost, "; ")
}
