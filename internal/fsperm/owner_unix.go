//go:build unix

package fsperm

import (
	"os"
	"slices"
	"syscall"
)

// Owner is the uid that owns fi's file.
func Owner(fi os.FileInfo) (int, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, false
	}
	return int(st.Uid), true
}

// Group is the gid that owns fi's file.
func Group(fi os.FileInfo) (int, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, false
	}
	return int(st.Gid), true
}

// InGroup reports whether this process has gid as its group or one of its
// supplementary groups.
func InGroup(gid int) bool {
	groups, _ := os.Getgroups()
	return os.Getegid() == gid || slices.Contains(groups, gid)
}
