package fsperm

import (
	"os"
	"syscall"
)

// Changed is when fi's file's inode last changed (its ctime: a write, a
// chmod, a chown, an ACL set or removed) and its inode number: what says
// a file was replaced or its permissions changed when its size, time,
// mode and owner did not.
func Changed(fi os.FileInfo) (ctime int64, ino uint64) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, 0
	}
	return st.Ctim.Nano(), st.Ino
}
