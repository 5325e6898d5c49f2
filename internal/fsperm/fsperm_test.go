package fsperm

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
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
	if os.Geteuid() != 0 {
		t.Log("not root: the check of a directory another user owns is skipped (chown needs root)")
		return
	}
	theirs := mk("theirs", 0o755)
	if err := os.Chown(theirs, 4242, 4242); err != nil {
		t.Fatal(err)
	}
	if err := CheckDir(theirs); err == nil || !strings.Contains(err.Error(), "is owned by uid 4242") {
		t.Errorf("another user's directory: %v", err)
	}
}
