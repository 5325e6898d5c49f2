//go:build !unix

package fsperm

import "os"

// Owner is unknown where files have no uid.
func Owner(os.FileInfo) (int, bool) { return 0, false }

// Group is unknown where files have no gid.
func Group(os.FileInfo) (int, bool) { return 0, false }

// InGroup is false where files have no gid.
func InGroup(int) bool { return false }
