// Package fsperm holds the router's checks of who may change the files and
// directories it trusts, as ssh checks a key and its directories
// (StrictModes): another local user must not be able to choose a secret
// the router reads, nor replace its socket or data file
// (docs/decisions/file-permissions.md).
package fsperm

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
)

// CheckDir refuses a directory in which another user could replace what
// the router keeps there (its socket, its data file, a password it
// generates): one owned by another user than the router's (root
// excepted), or one anyone may write to without the sticky bit.
func CheckDir(dir string) error { return checkDir(dir, true) }

// checkDir is CheckDir, with the sticky exception or without it.
func checkDir(dir string, stickyOK bool) error {
	fi, err := os.Stat(dir)
	if err != nil {
		return err
	}
	if err := CheckOwner(dir, fi); err != nil {
		return fmt.Errorf("%w: its owner could replace what the router keeps there; use a directory of the router's user", err)
	}
	switch perm := fi.Mode(); {
	case perm.Perm()&0o002 == 0:
	case perm&os.ModeSticky == 0:
		return fmt.Errorf("%s may be written by anyone (mode %04o): another user could replace what the router keeps there; chmod o-w %s", dir, perm.Perm(), dir)
	case !stickyOK:
		return fmt.Errorf("%s may be written by anyone (mode %04o, sticky): another user could put a socket of theirs at the path whenever the router's is gone, and answer the local services in its place; put the socket in a folder of the router's own (beside the data file, or /run/switchyard)", dir, perm.Perm())
	}
	return nil
}

// CheckSocketDir is CheckDir without the sticky exception, for the folder
// of the API socket. A client cannot tell who answers at a socket's path:
// in a sticky folder anyone may write (/tmp) another user may bind a socket
// of theirs at it whenever the router's is gone (a cleaner of /tmp, a
// restart), and take the local services' events with a forged 202 (a
// security trial). The data file, which the router opens and checks
// itself, may stay in such a folder.
func CheckSocketDir(dir string) error { return checkDir(dir, false) }

// CheckPeerSocketDir refuses the folder of a socket the router connects
// to (an inbox's deliver url unix:///...) when anyone may write to it,
// sticky or not: another user could bind a socket of theirs at the path
// whenever the service's is gone, and take the events the router hands
// on (a security trial did, in a sticky folder, and the router took its
// 200 for delivered). Its owner may be any user: the service's own.
func CheckPeerSocketDir(dir string) error {
	fi, err := os.Stat(dir)
	if err != nil {
		return err
	}
	if perm := fi.Mode().Perm(); perm&0o002 != 0 {
		return fmt.Errorf("%s may be written by anyone (mode %04o): another user could put a socket of theirs at the path whenever the service's is gone, and take what the router hands on; put the service's socket in a folder only it (and root) may write, such as /run/<service>", dir, perm|stickyBit(fi))
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
	return checkTrusted(path, fi, false, "could read or change what the router stores", "move it away")
}

// CheckMade refuses what is already at path when the router makes that
// file or folder itself beside its data file (the embedded broker's
// password and store, the disk's reserve): in a folder anyone may write,
// sticky ones included (which CheckDir lets pass), another user could have
// put it there before the router's first start. A link is taken only in a
// folder no one but its owner may write (the operator's link to a secret
// kept elsewhere): elsewhere whoever put it there chose what the router
// reads and where it writes (a security trial: a link to a root-owned
// 0600 file with two digits in it became the broker's password, its
// owner's checks passed through the link). What is not a link is the
// router's (or root's), and no one else may write it. Nothing there
// passes: the router makes it, its own.
func CheckMade(path string) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if fi.Mode()&os.ModeSymlink != 0 {
		return checkLinkDir(path)
	}
	return checkTrusted(path, fi, false, "chose what the router keeps there", "remove it, the router makes it again")
}

// checkLinkDir refuses the link at path unless its folder is the
// router's (or root's) and no one else may write it.
func checkLinkDir(path string) error {
	dir := filepath.Dir(path)
	fi, err := os.Stat(dir)
	if err != nil {
		return err
	}
	if err := CheckOwner(dir, fi); err != nil {
		return fmt.Errorf("%s is a symbolic link in another user's folder: %w; its owner chose what the router reads there; remove the link", path, err)
	}
	if perm := fi.Mode().Perm(); perm&0o002 != 0 {
		return fmt.Errorf("%s is a symbolic link in %s, which anyone may write (mode %04o): anyone could have put it there, to choose what the router reads and where it writes; remove it (the router makes its own), or keep the data file in a folder of the router's user", path, dir, fi.Mode().Perm()|stickyBit(fi))
	}
	return nil
}

// stickyBit is 01000 for a sticky folder, for its mode in an error.
func stickyBit(fi os.FileInfo) os.FileMode {
	if fi.Mode()&os.ModeSticky != 0 {
		return 0o1000
	}
	return 0
}

// checkTrusted refuses fi, the file at path, when another user than the
// router's (or root) owns it, or anyone may write it; with devices, a
// device may be anyone's to write (it is root's, and /dev/null and
// /dev/zero are so by design). risk says what that user could do,
// ownerFix what to do about an owner. Group write stays the operator's
// choice, as in CheckDir.
func checkTrusted(path string, fi os.FileInfo, devices bool, risk, ownerFix string) error {
	if err := CheckOwner(path, fi); err != nil {
		return fmt.Errorf("%w: its owner %s; %s", err, risk, ownerFix)
	}
	device := fi.Mode()&os.ModeDevice != 0
	if perm := fi.Mode().Perm(); perm&0o002 != 0 && !(devices && device) {
		return fmt.Errorf("%s may be written by anyone (mode %04o): anyone %s; chmod o-w %s", path, perm, risk, path)
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

// CheckPrivateTree refuses a folder whose files the router runs as code
// (the plugin cache: machine code wazero compiled, mapped executable), if
// anyone but the router's user (and root) could have put or changed
// anything in it: the folder, each folder in it and each file of those is
// the router's (or root's), no link, and writable by its owner only. No
// sticky exception: in a sticky /tmp another user could make the folder,
// or a file under the name the router would look for, first. A folder not
// there yet passes (the router makes it, private).
func CheckPrivateTree(dir string) error {
	return checkPrivate(dir, 2)
}

func checkPrivate(path string, depth int) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) && depth == 2 {
		return nil
	}
	if err != nil {
		return err
	}
	if fi.Mode()&os.ModeSymlink != 0 {
		return fmt.Errorf("%s is a symbolic link: the router runs what is in this folder as code, and takes no link there; remove it", path)
	}
	if err := CheckOwner(path, fi); err != nil {
		return fmt.Errorf("%w: the router runs what is in this folder as code; remove it, the router makes it again", err)
	}
	if perm := fi.Mode().Perm(); perm&0o022 != 0 {
		return fmt.Errorf("%s may be written by other users than its owner (mode %04o): the router runs what is in this folder as code; chmod go-w %s", path, perm, path)
	}
	if !fi.IsDir() || depth == 0 {
		return nil
	}
	entries, err := os.ReadDir(path)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if err := checkPrivate(filepath.Join(path, e.Name()), depth-1); err != nil {
			return err
		}
	}
	return nil
}
