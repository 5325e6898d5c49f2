package fsperm

import (
	"errors"
	"syscall"
)

// HasACL reports whether the file at path has a POSIX access ACL. With
// one, a mode's group bits are the ACL's mask: what named users and
// groups may at most do, not what the file's group may (acl(5)).
func HasACL(path string) bool {
	n, err := syscall.Getxattr(path, "system.posix_acl_access", nil)
	return err == nil && n > 0 || errors.Is(err, syscall.ERANGE)
}
