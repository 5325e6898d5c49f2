// Package fsperm holds the router's checks of who may change the files and
// directories it trusts, as ssh checks a key and its directories
// (StrictModes): another local user must not be able to choose a secret
// the router reads, nor replace its socket or data file
// (docs/decisions/file-permissions.md).
package fsperm

import (
	"fmt"
	"os"
	"os/user"
	"strconv"
)

// CheckDir refuses a directory in which another user could replace what
// the router keeps there (its socket, its data file, a password it
// generates): one owned by another user than the router's (root
// excepted), or one anyone may write to without the sticky bit.
func CheckDir(dir string) error {
	fi, err := os.Stat(dir)
	if err != nil {
		return err
	}
	if err := CheckOwner(dir, fi); err != nil {
		return fmt.Errorf("%w: its owner could replace what the router keeps there; use a directory of the router's user", err)
	}
	if perm := fi.Mode(); perm.Perm()&0o002 != 0 && perm&os.ModeSticky == 0 {
		return fmt.Errorf("%s may be written by anyone (mode %04o): another user could replace what the router keeps there; chmod o-w %s", dir, perm.Perm(), dir)
	}
	return nil
}

// CheckFile refuses a file the router is about to use, if it exists
// already, that another user owns or anyone may write: in a sticky shared
// directory (which CheckDir lets pass) another user could have created
// the data file before the router's first start.
func CheckFile(path string) error {
	fi, err := os.Stat(path)
	if err != nil {
		return nil // not there yet: the router creates it, private
	}
	if err := CheckOwner(path, fi); err != nil {
		return fmt.Errorf("%w: its owner could read or change what the router stores; move it away", err)
	}
	if perm := fi.Mode().Perm(); perm&0o002 != 0 {
		return fmt.Errorf("%s may be written by anyone (mode %04o): chmod o-w %s", path, perm, path)
	}
	return nil
}

// CheckOwner refuses fi, the file or directory at path, when another user
// than the router's owns it (root excepted: it can change anything anyway).
//
// Run as root (a `sudo router validate`, a router started by hand), every
// file of the service user's is another user's; the error then says to run
// as the owner instead.
func CheckOwner(path string, fi os.FileInfo) error {
	uid, ok := Owner(fi)
	if !ok || uid == 0 || uid == os.Geteuid() {
		return nil
	}
	if os.Geteuid() == 0 {
		return fmt.Errorf("%s is owned by uid %d, not by the router's user (root, here): run the router, and router validate, as the user that owns its files (sudo -u %s)", path, uid, sudoUser(uid))
	}
	return fmt.Errorf("%s is owned by uid %d, not by the router's user (uid %d)", path, uid, os.Geteuid())
}

// sudoUser names uid as sudo -u takes it: its user name, or #uid.
func sudoUser(uid int) string {
	if u, err := user.LookupId(strconv.Itoa(uid)); err == nil {
		return u.Username
	}
	return "'#" + strconv.Itoa(uid) + "'"
}

// Kind names what is at a path, for errors: "a regular file (12 bytes)",
// "a folder", "a symbolic link", "a device", "a special file (p---------)".
func Kind(fi os.FileInfo) string {
	switch t := fi.Mode().Type(); {
	case t == 0:
		return fmt.Sprintf("a regular file (%d bytes)", fi.Size())
	case t&os.ModeDir != 0:
		return "a folder"
	case t&os.ModeSymlink != 0:
		return "a symbolic link"
	case t&os.ModeDevice != 0:
		return "a device"
	default:
		return "a special file (" + t.String() + ")"
	}
}
