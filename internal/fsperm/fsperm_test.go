package fsperm

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/switchyard-router/switchyard/internal/testkit"
)

// CheckDir takes the router's own directories and a sticky shared one, and
// refuses one anyone may write to and one another user owns.
func TestCheckDir(t *testing.T) {
	base := t.TempDir()
	mk := func(name string, mode os.FileMode) string {
		d := filepath.Join(base, name)
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(d, mode); err != nil {
			t.Fatal(err)
		}
		return d
	}
	for _, d := range []string{mk("own", 0o750), mk("sticky", 0o777|os.ModeSticky)} {
		if err := CheckDir(d); err != nil {
			t.Errorf("%s: %v", d, err)
		}
	}
	if err := CheckDir(mk("open", 0o777)); err == nil || !strings.Contains(err.Error(), "may be written by anyone (mode 0777)") {
		t.Errorf("a world-writable directory: %v", err)
	}
	theirs := mk("theirs", 0o755)
	if !testkit.GiveToStranger(t, theirs) {
		return
	}
	if err := CheckDir(theirs); err == nil || !strings.Contains(err.Error(), "is owned by uid 4242") {
		t.Errorf("another user's directory: %v", err)
	}
	// GiveToStranger works as root only: the error says to run as the owner.
	if err := CheckDir(theirs); err == nil || !strings.Contains(err.Error(), "not by the router's user (root, here): run the router, and router validate, as the user that owns its files (sudo -u '#4242')") {
		t.Errorf("another user's directory, checked as root: %v", err)
	}
}

// CheckFile takes a file that is not there yet and the router's own, and
// refuses one anyone may write and one another user owns.
func TestCheckFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "router.db")
	if err := CheckFile(path); err != nil {
		t.Errorf("a file not there yet: %v", err)
	}
	os.WriteFile(path, nil, 0o600)
	if err := CheckFile(path); err != nil {
		t.Errorf("the router's own file: %v", err)
	}
	os.Chmod(path, 0o666)
	if err := CheckFile(path); err == nil || !strings.Contains(err.Error(), "may be written by anyone (mode 0666)") {
		t.Errorf("a world-writable file: %v", err)
	}
	os.Chmod(path, 0o600)
	if !testkit.GiveToStranger(t, path) {
		return
	}
	if err := CheckFile(path); err == nil || !strings.Contains(err.Error(), "is owned by uid 4242") {
		t.Errorf("another user's file: %v", err)
	}
}

// A file that decides what the router does (its configuration, a plugin's
// module) is refused when anyone may write it or another user owns it:
// before, a configuration and a module another user could change were
// taken, and a routine reload then ran theirs (a security trial).
func TestReadTrusted(t *testing.T) {
	path := filepath.Join(t.TempDir(), "policies.hcl")
	os.WriteFile(path, []byte("x"), 0o644)
	if b, err := ReadTrusted(path, 10, "a configuration file"); err != nil || string(b) != "x" {
		t.Errorf("the router's own file: %q %v", b, err)
	}
	os.Chmod(path, 0o666)
	if _, err := ReadTrusted(path, 10, "a configuration file"); err == nil || !strings.Contains(err.Error(), "may be written by anyone (mode 0666): anyone could change what the router does, as a configuration file") {
		t.Errorf("a world-writable file: %v", err)
	}
	os.Chmod(path, 0o664) // a group the operator lets in
	if _, err := ReadTrusted(path, 10, "a configuration file"); err != nil {
		t.Errorf("a group-writable file: %v", err)
	}
	if !testkit.GiveToStranger(t, path) {
		return
	}
	if _, err := ReadTrusted(path, 10, "a plugin module"); err == nil || !strings.Contains(err.Error(), "is owned by uid 4242") {
		t.Errorf("another user's file: %v", err)
	}
}

// A trusted file's folder is checked too: in one anyone may write, without
// the sticky bit, another user could rename a link to another module over
// a plugin's path, and the next reload took it with every check passed on
// the module it led to (a security trial). In a sticky one, the
// operator's link passes (a Kubernetes secret's files are links in one)
// and another user's does not.
func TestReadTrustedChecksTheFolder(t *testing.T) {
	top := t.TempDir()
	open := filepath.Join(top, "open")
	os.Mkdir(open, 0o777)
	os.Chmod(open, 0o777)
	module := filepath.Join(open, "enrich.wasm")
	os.WriteFile(module, []byte("x"), 0o644)
	if _, err := ReadTrusted(module, 10, "a plugin module"); err == nil || !strings.Contains(err.Error(), "may be written by anyone (mode 0777)") {
		t.Errorf("a module in a folder anyone may write: %v", err)
	}
	os.Chmod(open, 0o777|os.ModeSticky)
	if b, err := ReadTrusted(module, 10, "a plugin module"); err != nil || string(b) != "x" {
		t.Errorf("the router's module in a sticky folder: %q %v", b, err)
	}
	link := filepath.Join(open, "link.wasm")
	if err := os.Symlink(module, link); err != nil {
		t.Fatal(err)
	}
	if b, err := ReadTrusted(link, 10, "a plugin module"); err != nil || string(b) != "x" {
		t.Errorf("the router's own link in a sticky folder: %q %v", b, err)
	}
	// The router's own link, in its own folder, into a folder open to all:
	// what the link leads to could be replaced there.
	open2 := filepath.Join(top, "open2")
	os.Mkdir(open2, 0o777)
	os.Chmod(open2, 0o777)
	os.WriteFile(filepath.Join(open2, "m.wasm"), []byte("x"), 0o644)
	mine := filepath.Join(top, "mine.wasm")
	os.Symlink(filepath.Join(open2, "m.wasm"), mine)
	if _, err := ReadTrusted(mine, 10, "a plugin module"); err == nil || !strings.Contains(err.Error(), "leads to "+filepath.Join(open2, "m.wasm")) {
		t.Errorf("a link into a folder anyone may write: %v", err)
	}
	if os.Geteuid() != 0 {
		t.Log("not root: the check of another user's link is skipped (lchown needs root)")
		return
	}
	if err := os.Lchown(link, testkit.Stranger, testkit.Stranger); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadTrusted(link, 10, "a plugin module"); err == nil || !strings.Contains(err.Error(), "is a symbolic link of another user's") {
		t.Errorf("another user's link to the router's module: %v", err)
	}
}

// A pipe anyone may write is refused as a file anyone may write is (a
// review: every non-regular file passed unchecked); the router's own pipe
// (a shell's <(...)) and a device such as /dev/zero are read.
func TestReadTrustedPipes(t *testing.T) {
	path := filepath.Join(t.TempDir(), "policies.hcl")
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		t.Skipf("no fifo here: %v", err)
	}
	// Opening a pipe to read waits for a writer: one writes "x" each time.
	// The first writer must be gone before the second read opens the pipe,
	// or that read meets both writers and reads "xx" (CI saw it once).
	feed := func() <-chan struct{} {
		done := make(chan struct{})
		go func() {
			defer close(done)
			if f, err := os.OpenFile(path, os.O_WRONLY, 0); err == nil {
				f.Write([]byte("x"))
				f.Close()
			}
		}()
		return done
	}
	os.Chmod(path, 0o666)
	first := feed()
	if _, err := ReadTrusted(path, 10, "a configuration file"); err == nil || !strings.Contains(err.Error(), "may be written by anyone") {
		t.Errorf("a pipe anyone may write: %v", err)
	}
	<-first
	os.Chmod(path, 0o600)
	feed()
	if b, err := ReadTrusted(path, 10, "a configuration file"); err != nil || string(b) != "x" {
		t.Errorf("the router's own pipe: %q %v", b, err)
	}
	if _, err := ReadTrusted("/dev/zero", 10, "a configuration file"); err == nil || !strings.Contains(err.Error(), "holds more than") {
		t.Errorf("/dev/zero: %v", err)
	}
}

// What the router makes beside its data file (a generated password, the
// embedded broker's store, the reserve) is refused when someone else could
// have put it there first: a link in a folder anyone may write (a sticky
// one too: a security trial's link to a root-owned 0600 file became the
// broker's password), or another user's file. A link in the router's own
// folder (the operator's, to a secret kept elsewhere) and nothing at all
// pass.
func TestCheckMade(t *testing.T) {
	base := t.TempDir()
	target := filepath.Join(base, "secret")
	os.WriteFile(target, []byte("28\n"), 0o600)
	for _, c := range []struct {
		name string
		mode os.FileMode
		want string
	}{
		{"own", 0o750, ""},
		{"sticky", 0o777 | os.ModeSticky, "is a symbolic link in " + base + "/sticky, which anyone may write (mode 1777)"},
		{"open", 0o777, "which anyone may write (mode 0777)"},
	} {
		dir := filepath.Join(base, c.name)
		os.Mkdir(dir, 0o700)
		os.Chmod(dir, c.mode)
		link := filepath.Join(dir, "nats-local.password")
		if err := CheckMade(link); err != nil {
			t.Errorf("nothing there yet, folder %04o: %v", c.mode.Perm(), err)
		}
		if err := os.Symlink(target, link); err != nil {
			t.Fatal(err)
		}
		err := CheckMade(link)
		if c.want == "" && err != nil || c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)) {
			t.Errorf("a link in a folder of mode %04o: %v, want %q", c.mode.Perm(), err, c.want)
		}
	}
	own := filepath.Join(base, "sticky", "router.db.reserve")
	os.WriteFile(own, nil, 0o600)
	if err := CheckMade(own); err != nil {
		t.Errorf("the router's own file: %v", err)
	}
	if !testkit.GiveToStranger(t, own) {
		return
	}
	if err := CheckMade(own); err == nil || !strings.Contains(err.Error(), "is owned by uid 4242") {
		t.Errorf("another user's file: %v", err)
	}
}
