//go:build !unix

package storage

import (
	"errors"
	"os"
)

// heldByAnother is false where the router does not read file locks.
func heldByAnother(string) bool { return false }

// lockFile fails where the router reads no file locks: what needs it
// (router db rollback) must know no router has the file open.
func lockFile(*os.File, bool) error {
	return errors.New("needs file locks (flock), which the router reads only on unix")
}
