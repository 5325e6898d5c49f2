//go:build !unix

package storage

// heldByAnother is false where the router does not read file locks.
func heldByAnother(string) bool { return false }
