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

// BecomeFolderOwner makes this process, when it runs as root, the user
// and group that own the folder holding path, with that user's
// supplementary groups (none, for a uid without a passwd entry), for
// good: a tool that then makes, renames, opens, chmods and chowns files
// there by path does so with the rights of whoever could change the
// folder under it. As root, such a tool follows what that user puts at a
// path between two of its steps (a link, renamed over the copy `router db
// compact` had just made, gave that user any file of root's through its
// chown: a security trial). It says whether it changed anything; it
// refuses a folder of root's that others may write without the sticky
// bit (CheckDir), where any user could. On Linux, Go changes the ids of
// every thread of the process (since Go 1.16).
func BecomeFolderOwner(path string) (bool, error) {
	if os.Geteuid() != 0 {
		return false, nil
	}
	dir := filepath.Dir(path)
	fi, err := os.Stat(dir)
	if err != nil {
		return false, err
	}
	uid, _ := Owner(fi)
	gid, _ := Group(fi)
	if uid == 0 {
		return false, CheckDir(dir)
	}
	groups := []int{gid}
	if u, err := user.LookupId(strconv.Itoa(uid)); err == nil {
		if ids, err := u.GroupIds(); err == nil {
			for _, id := range ids {
				if n, err := strconv.Atoi(id); err == nil && n != gid {
					groups = append(groups, n)
				}
			}
		}
	}
	if err := syscall.Setgroups(groups); err != nil {
		return false, fmt.Errorf("taking the groups of %s's owner (uid %d): %w", dir, uid, err)
	}
	if err := syscall.Setgid(gid); err != nil {
		return false, fmt.Errorf("taking the group of %s (gid %d): %w", dir, gid, err)
	}
	if err := syscall.Setuid(uid); err != nil {
		return false, fmt.Errorf("becoming %s's owner (uid %d): %w", dir, uid, err)
	}
	return true, nil
}

// CanRun says whether this process may run the program at path, by its
// ids now (after BecomeFolderOwner).
func CanRun(path string) error { return syscall.Access(path, 1) } // X_OK
