//go:build !linux

package fsperm

// HasACL is false where the router does not read ACLs.
func HasACL(string) bool { return false }
