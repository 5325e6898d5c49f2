package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/switchyard-router/switchyard/internal/fsperm"
	"github.com/switchyard-router/switchyard/storage"
)

// folderUser is the uid and gid of the user who owns the data folder in
// the tests below: one without a passwd entry, as a service user's id may
// be on another host.
const folderUser = 4242

// `router db compact` run by root on a data file in a folder another user
// owns acts as that user: a link that user renames over the compacted
// copy once the tool has made it, to a file of root's, does not give them
// that file (a security trial: as root, the tool's chmod and chown
// followed the link, 4 of 4 tries on a 200 MB file, and the user then
// wrote the file). The attacker here renames the link in at four moments
// after the copy's second close; the window (between the copy's check and
// its chown) is narrow on a small file, so before the change this test
// rarely met it, and TestADBToolRunByRootCompactsAsTheFoldersOwner checks
// the change itself. With the tool acting as the folder's owner, whatever
// the moment, it can reach nothing of root's.
func TestADBToolRunByRootActsAsTheFoldersOwner(t *testing.T) {
	bin, data := rootAndAFolderOfAnother(t)
	target := filepath.Join(filepath.Dir(filepath.Dir(data)), "roots-only")
	if err := os.WriteFile(target, []byte("root's"), 0o600); err != nil {
		t.Fatal(err)
	}
	swaps := 0
	for _, delay := range []time.Duration{0, 300 * time.Microsecond, time.Millisecond, 2 * time.Millisecond} {
		os.Remove(data)
		os.Remove(data + ".compacting")
		makeDataFile(t, data)
		swapped := swapInALink(t, data+".compacting", target, delay)
		out, err := exec.Command(bin, "db", "compact", data).CombinedOutput()
		if <-swapped {
			swaps++
		}
		t.Logf("after %v: %v\n%s", delay, err, out)
		fi, serr := os.Lstat(target)
		if serr != nil {
			t.Fatal(serr)
		}
		owner, _ := fsperm.Owner(fi)
		content, _ := os.ReadFile(target)
		if owner != 0 || fi.Mode().Perm() != 0o600 || string(content) != "root's" {
			t.Fatalf("after %v: root's file is now uid %d, mode %04o, holding %q", delay, owner, fi.Mode().Perm(), content)
		}
	}
	if swaps == 0 {
		t.Fatal("no link was swapped in while the tool ran: the test tried nothing")
	}
}

// Without anyone in the way, root's `router db compact` in a folder of
// another user compacts the file as that user: the copy is theirs, with
// the file's mode, and the tool says as whom it acted.
func TestADBToolRunByRootCompactsAsTheFoldersOwner(t *testing.T) {
	bin, data := rootAndAFolderOfAnother(t)
	os.Chmod(data, 0o640)
	out, err := exec.Command(bin, "db", "compact", data).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "acting as uid 4242") {
		t.Fatalf("compact: %v\n%s", err, out)
	}
	fi, err := os.Stat(data)
	if err != nil {
		t.Fatal(err)
	}
	if owner, _ := fsperm.Owner(fi); owner != folderUser || fi.Mode().Perm() != 0o640 || fi.Size() >= 64<<20 {
		t.Fatalf("the compacted file: uid %d, mode %04o, %d bytes\n%s", owner, fi.Mode().Perm(), fi.Size(), out)
	}
	if out, err := exec.Command(bin, "db", "check", data).CombinedOutput(); err != nil {
		t.Fatalf("check after: %v\n%s", err, out)
	}
}

// In a folder of root's that a group may write (root:4242 0770, a layout
// the router accepts), root's `router db compact` acts as the data file's
// owner, who may change the folder through the group (a review: the tool
// stayed root there, and the attack of the test above went through 2 of 6
// tries); root's own file there is refused, naming sudo -u.
func TestADBToolRunByRootInAGroupsFolder(t *testing.T) {
	bin, data := rootAndAFolderOfAnother(t)
	folder := filepath.Dir(data)
	if err := os.Chown(folder, 0, folderUser); err != nil {
		t.Fatal(err)
	}
	os.Chmod(folder, 0o770)
	out, err := exec.Command(bin, "db", "compact", data).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "acting as uid 4242") {
		t.Fatalf("compact in a group's folder: %v\n%s", err, out)
	}
	os.Chown(data, 0, 0)
	out, err = exec.Command(bin, "db", "compact", data).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "is root's, in "+folder+", which others may write") {
		t.Fatalf("compact of root's file in a group's folder: %v\n%s", err, out)
	}
}

// rootAndAFolderOfAnother skips unless the test runs as root, and returns
// a router binary that folderUser may run and a data file of 64 MiB, most
// of it free, in a folder (0750) and file (0600) folderUser owns.
func rootAndAFolderOfAnother(t *testing.T) (bin, data string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: it runs a db tool as root on a folder of another user")
	}
	top, err := os.MkdirTemp("", "switchyard-rootdb-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(top) })
	os.Chmod(top, 0o755)
	bin = filepath.Join(top, "router")
	if err := copyFile(routerBinary(t), bin, 0o755); err != nil {
		t.Fatal(err)
	}
	folder := filepath.Join(top, "data")
	if err := os.Mkdir(folder, 0o750); err != nil {
		t.Fatal(err)
	}
	data = filepath.Join(folder, "router.db")
	makeDataFile(t, data)
	if err := os.Chown(folder, folderUser, folderUser); err != nil {
		t.Fatal(err)
	}
	return bin, data
}

// makeDataFile makes a data file at path of 64 MiB, most of it past what
// its pages use, owned by folderUser: made in a folder of root's (the
// storage refuses to open one in another's), then renamed to path.
func makeDataFile(t *testing.T, path string) {
	t.Helper()
	made := filepath.Join(t.TempDir(), "router.db")
	db, err := storage.Open(made, storage.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(made, 64<<20); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(made, folderUser, folderUser); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(made, path); err != nil {
		t.Fatal(err)
	}
}

// swapInALink renames a link to target over path delay after the second
// time a file at path is closed after writing (the compaction's copy: made,
// then written by bbolt), as the folder's owner could; the channel says
// whether it did, or gave up (10 s).
func swapInALink(t *testing.T, path, target string, delay time.Duration) <-chan bool {
	t.Helper()
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := unix.InotifyAddWatch(fd, filepath.Dir(path), unix.IN_CLOSE_WRITE); err != nil {
		t.Fatal(err)
	}
	done := make(chan bool, 1)
	go func() {
		swapped := false
		defer func() { done <- swapped }()
		defer unix.Close(fd)
		seen, buf := 0, make([]byte, 4096)
		for end := time.Now().Add(10 * time.Second); time.Now().Before(end) && seen < 2; {
			n, err := unix.Read(fd, buf)
			if err != nil {
				time.Sleep(100 * time.Microsecond)
				continue
			}
			for off := 0; off+unix.SizeofInotifyEvent <= n; {
				ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
				name := strings.TrimRight(string(buf[off+unix.SizeofInotifyEvent:off+unix.SizeofInotifyEvent+int(ev.Len)]), "\x00")
				if name == filepath.Base(path) {
					seen++
				}
				off += unix.SizeofInotifyEvent + int(ev.Len)
			}
		}
		if seen < 2 {
			return
		}
		time.Sleep(delay)
		link := path + ".link"
		if os.Symlink(target, link) == nil {
			swapped = os.Rename(link, path) == nil
		}
	}()
	return done
}
