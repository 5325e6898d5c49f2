package fsperm

import (
	"encoding/binary"
	"testing"
)

// An ACL names someone when it has a named user or group entry; the three
// entries every mode has are no ACL, and a form not understood counts as
// naming someone (the caller then refuses the file).
func TestNamesSomeone(t *testing.T) {
	acl := func(tags ...uint16) []byte {
		b := binary.LittleEndian.AppendUint32(nil, 2)
		for _, tag := range tags {
			b = binary.LittleEndian.AppendUint16(b, tag)
			b = binary.LittleEndian.AppendUint16(b, 4)
			b = binary.LittleEndian.AppendUint32(b, 0xffffffff)
		}
		return b
	}
	for _, c := range []struct {
		name string
		b    []byte
		want bool
	}{
		{"the mode's three entries", acl(0x01, 0x04, 0x20), false},
		{"a named user", acl(0x01, 0x02, 0x04, 0x10, 0x20), true},
		{"a named group", acl(0x01, 0x04, 0x08, 0x10, 0x20), true},
		{"another version", append([]byte{3, 0, 0, 0}, acl(0x01)[4:]...), true},
		{"a torn entry", acl(0x01, 0x04, 0x20)[:15], true},
	} {
		if got := namesSomeone(c.b); got != c.want {
			t.Errorf("%s: namesSomeone = %v, want %v", c.name, got, c.want)
		}
	}
}
