package fsperm

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

// Limits on the files the router reads whole: a path to something endless
// (/dev/zero, a growing log) was read until memory ran out.
const (
	MaxConfigFile = 8 << 20   // a configuration file
	MaxSecretFile = 1 << 20   // a password, token, tokens or CA file
	MaxPluginFile = 128 << 20 // a plugin's WebAssembly module
)

// ReadFile reads the file at path whole, or says it holds more than limit
// bytes (what, such as "a configuration file", names it then).
func ReadFile(path string, limit int64, what string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return readAll(f, path, limit, what)
}

// readAll reads f whole, or says it holds more than limit bytes.
func readAll(f *os.File, path string, limit int64, what string) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("%s holds more than the %d MiB %s may: is it the right file?", path, limit>>20, what)
	}
	return b, nil
}

// ReadTrusted is ReadFile for a file that decides what the router does
// (its configuration, a plugin's module, a CA file): refused when another
// user than the router's (or root) owns it, or anyone may write it, as
// checked on the file opened, not on the path: that user could change
// what the router runs, and a reload or restart would take it without a
// word (a security trial). Its folder, and the link its path may be, are
// checked too (checkHolder).
func ReadTrusted(path string, limit int64, what string) ([]byte, error) {
	if err := checkHolder(path, what); err != nil {
		return nil, err
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if fi.IsDir() {
		// Before its mode: /tmp got the advice "chmod o-w /tmp".
		return nil, fmt.Errorf("%s is a folder: name %s", path, what)
	}
	// A pipe is not exempt: another user's, or one anyone may write, would
	// feed the router their content (a review).
	if err := checkTrusted(path, fi, true, "could change what the router does, as "+what, "chown it to the router's user or root"); err != nil {
		return nil, err
	}
	return readAll(f, path, limit, what)
}

// checkHolder refuses the folder holding path when another user could put
// another file at path: a folder owned by another user than the router's
// (or root), or one anyone may write without the sticky bit; a link at
// path that another user owns (in a sticky folder, only its owner may
// replace it), and one that leads into such a folder. A security trial
// renamed a link to another module over a plugin's path in a folder open
// to all: the reload loaded it, and every check passed, on the module the
// link led to. The operator's link in a folder of root's, sticky and open
// to all, passes (a Kubernetes secret's files are links so). What is not
// there is left to the open, which names the file.
func checkHolder(path, what string) error {
	if err := CheckDir(filepath.Dir(path)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%s, %s: %w", path, what, err)
	}
	fi, err := os.Lstat(path)
	if err != nil || fi.Mode()&os.ModeSymlink == 0 {
		return nil // not there: the open says so
	}
	if err := CheckOwner(path, fi); err != nil {
		return fmt.Errorf("%s, %s, is a symbolic link of another user's: %w; its owner chose what the router reads there", path, what, err)
	}
	// Where the link leads is held to the same rule (a review: the
	// operator's link into a folder open to all passed).
	target, err := filepath.EvalSymlinks(path)
	if err != nil {
		return nil // a dangling link: the open says so
	}
	if err := CheckDir(filepath.Dir(target)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%s, %s, leads to %s: %w", path, what, target, err)
	}
	return nil
}
