//go:build unix

package config

import (
	"os"
	"syscall"
)

// ownerOf is the uid that owns fi's file.
func ownerOf(fi os.FileInfo) (int, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, false
	}
	return int(st.Uid), true
}
