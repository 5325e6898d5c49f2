package fsperm

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A file within the limit reads whole; one past it, or something endless
// (/dev/zero), is an error that says so after limit+1 bytes, not a read
// until memory runs out.
func TestReadFileBounded(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	os.WriteFile(path, []byte(strings.Repeat("x", 1<<20)), 0o600)
	if b, err := ReadFile(path, 1<<20, "a test file"); err != nil || len(b) != 1<<20 {
		t.Fatalf("at the limit: %d bytes, %v", len(b), err)
	}
	if _, err := ReadFile(path, 1<<20-1, "a test file"); err == nil || !strings.Contains(err.Error(), "holds more than") {
		t.Fatalf("past the limit: %v", err)
	}
	if _, err := os.Stat("/dev/zero"); err == nil {
		if _, err := ReadFile("/dev/zero", MaxSecretFile, "a secret file"); err == nil || !strings.Contains(err.Error(), "/dev/zero holds more than the 1 MiB a secret file may") {
			t.Fatalf("/dev/zero: %v", err)
		}
	}
}

// A folder named where a trusted file is read is said to be a folder,
// whatever its mode: /tmp (1777) got "may be written by anyone ...; chmod
// o-w /tmp", advice that would break it for every user.
func TestReadTrustedNamesAFolder(t *testing.T) {
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o1777); err != nil {
		t.Fatal(err)
	}
	_, err := ReadTrusted(dir, MaxConfigFile, "a configuration file")
	if err == nil || !strings.Contains(err.Error(), "is a folder: name a configuration file") || strings.Contains(err.Error(), "chmod") {
		t.Fatalf("error %v", err)
	}
}
