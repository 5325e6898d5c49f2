package fsperm

import (
	"encoding/binary"
	"syscall"
)

// HasACL reports whether the file at path has a POSIX access ACL that
// names users or groups. With one, a mode's group bits are the ACL's mask:
// what those named users and groups may at most do, not what the file's
// group may (acl(5)). An ACL of the three entries the mode holds anyway
// is no ACL. A file whose ACL cannot be read counts as having one.
func HasACL(path string) bool {
	buf := make([]byte, 512)
	n, err := syscall.Getxattr(path, "system.posix_acl_access", buf)
	switch {
	case err == syscall.ENODATA || err == syscall.ENOTSUP:
		return false
	case err != nil:
		return true // too large for buf (ERANGE), or unreadable: refuse
	}
	return namesSomeone(buf[:n])
}

// namesSomeone reads the xattr's form of an ACL (a 4-byte version, then
// 8-byte entries: tag, permissions, id) for an ACL_USER or ACL_GROUP
// entry. A form it does not know counts as naming someone.
func namesSomeone(b []byte) bool {
	const aclUser, aclGroup = 0x02, 0x08
	if len(b) < 4 || binary.LittleEndian.Uint32(b) != 2 || (len(b)-4)%8 != 0 {
		return true
	}
	for e := b[4:]; len(e) >= 8; e = e[8:] {
		if tag := binary.LittleEndian.Uint16(e); tag == aclUser || tag == aclGroup {
			return true
		}
	}
	return false
}
