//go:build !unix

package storage

import "os"

// heldByAnother is false where the router does not read file locks.
func heldByAnother(string) bool { return false }

// lockFile takes no lock where the router reads no file locks.
func lockFile(*os.File, bool) error { return nil }
