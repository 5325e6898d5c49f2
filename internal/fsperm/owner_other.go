//go:build !unix

package fsperm

import "os"

// Owner is unknown where files have no uid.
func Owner(os.FileInfo) (int, bool) { return 0, false }
