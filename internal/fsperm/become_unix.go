//go:build unix

package fsperm

import (
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
)

// BecomeWriterOf makes this process, when it runs as root, a user who may
// change the folder holding path already, for good: a tool that then
// makes, renames, opens, chmods and chowns files there by path does so
// with no more rights than whoever could change the folder under it. As
// root, such a tool follows what that user puts at a path between two of
// its steps (a link, renamed over the copy `router db compact` had just
// made, gave that user any file of root's through its chown: a security
// trial). The user is the folder's owner when that is not root; for a
// folder of root's that a group or an ACL lets others write (the router
// accepts `root:switchyard 0770`), the owner of the file at path (a review:
// the tool stayed root there, and the attack went through); root's own
// file there is refused, as is a folder of root's others may write
// without the sticky bit (CheckDir). The process takes the user's own
// group and supplementary groups from the user database, or, for a uid
// without an entry, the group of what it owns. It says whether it changed
// anything. On Linux, Go changes the ids of every thread of the process
// (since Go 1.16).
func BecomeWriterOf(path string) (bool, error) {
	if os.Geteuid() != 0 {
		return false, nil
	}
	uid, gid, err := writerOf(path)
	if err != nil || uid == 0 {
		return false, err
	}
	primary, groups := groupsOf(uid, gid)
	if err := syscall.Setgroups(groups); err != nil {
		return false, fmt.Errorf("taking the groups of uid %d: %w", uid, err)
	}
	if err := syscall.Setgid(primary); err != nil {
		return false, fmt.Errorf("taking the group of uid %d (gid %d): %w", uid, primary, err)
	}
	if err := syscall.Setuid(uid); err != nil {
		return false, fmt.Errorf("becoming uid %d: %w", uid, err)
	}
	return true, nil
}

// writerOf is the user BecomeWriterOf becomes for path, and the group of
// what that user owns there; uid 0 for a folder only root may change
// (nothing to become), or an error.
func writerOf(path string) (uid, gid int, err error) {
	dir := filepath.Dir(path)
	fi, err := os.Stat(dir)
	if err != nil {
		return 0, 0, err
	}
	uid, _ = Owner(fi)
	gid, _ = Group(fi)
	if uid != 0 {
		return uid, gid, nil
	}
	if !(fi.Mode().Perm()&0o020 != 0 && gid != 0 || HasACL(dir)) {
		return 0, 0, CheckDir(dir)
	}
	ffi, err := os.Stat(path)
	if err != nil {
		return 0, 0, err
	}
	uid, _ = Owner(ffi)
	gid, _ = Group(ffi)
	if uid == 0 {
		return 0, 0, fmt.Errorf("%s is root's, in %s, which others may write (its group gid %d, or an ACL): run this tool as the user the router runs as (sudo -u that user), not as root", path, dir, gid)
	}
	return uid, gid, nil
}

// groupsOf is uid's primary group and its groups (the primary first), from
// the user database; for a uid without an entry, gid alone.
func groupsOf(uid, gid int) (int, []int) {
	u, err := user.LookupId(strconv.Itoa(uid))
	if err != nil {
		return gid, []int{gid}
	}
	primary, err := strconv.Atoi(u.Gid)
	if err != nil {
		return gid, []int{gid}
	}
	groups := []int{primary}
	if ids, err := u.GroupIds(); err == nil {
		for _, id := range ids {
			if n, err := strconv.Atoi(id); err == nil && n != primary {
				groups = append(groups, n)
			}
		}
	}
	return primary, groups
}

// CanRun says whether this process may run the program at path, by its
// ids now (after BecomeWriterOf).
func CanRun(path string) error { return syscall.Access(path, 1) } // X_OK
