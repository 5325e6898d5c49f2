//go:build unix

package main

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
)

// A tokens file root owns may be read by the router's group (root:group
// 0640, PostgreSQL's rule for its key), not changed by it nor read by
// others, nor through an ACL; each refusal says what keeps the file
// readable by the router. Checked with router validate run as another user
// (and as root), on real files. It needs root, to own the file and to run
// the router as someone else.
func TestRootsSecretMayBeReadByTheGroup(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("skipped: needs root, to make a root-owned key and run the router as another user")
	}
	const nobody = 65534
	s := newSecretSetup(t, nobody)
	for _, mode := range []os.FileMode{0o640, 0o440} {
		if out, err := s.validate(t, mode, 0, nobody, true); err != nil {
			t.Errorf("mode %04o, root:nobody: validate as nobody: %v\n%s", mode, err, out)
		}
	}
	for _, mode := range []os.FileMode{0o660, 0o644, 0o604} {
		out, err := s.validate(t, mode, 0, nobody, true)
		if err == nil || !strings.Contains(out, ":4:17: tokens_file: "+s.tokens) || !strings.Contains(out, "chmod 640 "+s.tokens) {
			t.Errorf("mode %04o, root:nobody: validate as nobody passed or did not say chmod 640: %v\n%s", mode, err, out)
		}
	}
	// Not in the file's group: chmod 640 alone would lock the router out.
	if out, err := s.validate(t, 0o644, 0, 0, true); err == nil || !strings.Contains(out, "chgrp") {
		t.Errorf("mode 0644, root:root: validate as nobody passed or did not say chgrp: %v\n%s", err, out)
	}
	// Checked as root, root:nobody 0640 is the service's to read: say so,
	// rather than chmod 600, which would lock the service out.
	if out, err := s.validate(t, 0o640, 0, nobody, false); err == nil || !strings.Contains(out, "sudo -u") {
		t.Errorf("mode 0640, root:nobody: validate as root passed or did not say sudo -u: %v\n%s", err, out)
	}
	// An ACL's named users hide behind the group bits, which are its mask.
	s.chown(t, 0, nobody)
	if err := os.Chmod(s.tokens, 0o640); err != nil {
		t.Fatal(err)
	}
	if err := setReadACL(s.tokens, 4242); err != nil {
		t.Logf("the ACL case is skipped: this file system takes no ACL: %v", err)
		return
	}
	if out, err := s.run(t, true); err == nil || !strings.Contains(out, "access ACL") {
		t.Errorf("root:nobody 0640 with an ACL for uid 4242: validate as nobody passed or did not name the ACL: %v\n%s", err, out)
	}
}

// secretSetup is a router binary, a config and a tokens file in a folder
// another user may reach.
type secretSetup struct {
	bin, config, data, tokens string
	uid                       int // whom validate runs as, unless as root
}

func newSecretSetup(t *testing.T, uid int) *secretSetup {
	base, err := os.MkdirTemp("", "secret-group-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	s := &secretSetup{bin: filepath.Join(base, "router"), config: filepath.Join(base, "policies.hcl"),
		data: filepath.Join(base, "data"), tokens: filepath.Join(base, "tokens.json"), uid: uid}
	mustRoot(t, os.Chmod(base, 0o755), os.Mkdir(s.data, 0o700), copyFile(routerBinary(t), s.bin, 0o755),
		os.WriteFile(s.tokens, []byte(`{"tokens":[{"token":"a-long-random-secret-for-acme","tenant":"acme"}]}`), 0o600),
		os.WriteFile(s.config, []byte(fmt.Sprintf("listen {\n  socket      = %q\n  http        = \"127.0.0.1:0\"\n  tokens_file = %q\n}\nstorage { path = %q }\n",
			filepath.Join(s.data, "r.sock"), s.tokens, filepath.Join(s.data, "r.db"))), 0o644))
	if err := os.Chown(s.data, uid, uid); err != nil {
		t.Skipf("skipped: cannot give a folder to uid %d here (a user namespace?): %v", uid, err)
	}
	// Another user must reach the binary: a private TMPDIR, or /tmp
	// mounted noexec, makes that impossible here, and says nothing of the
	// router.
	probe := exec.Command(s.bin, "version")
	probe.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid)}}
	if out, err := probe.CombinedOutput(); err != nil {
		var exit *exec.ExitError
		if !errors.As(err, &exit) {
			t.Skipf("skipped: cannot run the router as uid %d from %s: %v", uid, base, err)
		}
		t.Fatalf("router version as uid %d: %v\n%s", uid, err, out)
	}
	return s
}

// validate sets the tokens file's owner and mode, then runs router
// validate as s.uid (asUser) or as root.
func (s *secretSetup) validate(t *testing.T, mode os.FileMode, uid, gid int, asUser bool) (string, error) {
	t.Helper()
	s.chown(t, uid, gid)
	if err := os.Chmod(s.tokens, mode); err != nil {
		t.Fatal(err)
	}
	return s.run(t, asUser)
}

func (s *secretSetup) chown(t *testing.T, uid, gid int) {
	t.Helper()
	if err := os.Chown(s.tokens, uid, gid); err != nil {
		t.Fatal(err)
	}
}

func (s *secretSetup) run(t *testing.T, asUser bool) (string, error) {
	t.Helper()
	cmd := exec.Command(s.bin, "validate", "-config", s.config)
	cmd.Dir = s.data
	if asUser {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(s.uid), Gid: uint32(s.uid)}}
	}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// setReadACL gives uid read access to path through a POSIX access ACL
// (user::rw-, user:uid:r--, group::r--, mask::r--, other::---), in the
// xattr's binary form (acl(5); Linux only).
func setReadACL(path string, uid uint32) error {
	if runtime.GOOS != "linux" {
		return errors.New("ACLs are set here on Linux only")
	}
	const undefined = 0xffffffff
	b := binary.LittleEndian.AppendUint32(nil, 2) // the format's version
	for _, e := range []struct {
		tag, perm uint16
		id        uint32
	}{{0x01, 6, undefined}, {0x02, 4, uid}, {0x04, 4, undefined}, {0x10, 4, undefined}, {0x20, 0, undefined}} {
		b = binary.LittleEndian.AppendUint16(b, e.tag)
		b = binary.LittleEndian.AppendUint16(b, e.perm)
		b = binary.LittleEndian.AppendUint32(b, e.id)
	}
	return setxattr(path, "system.posix_acl_access", b)
}

// mustRoot fails the test on the first error of a root-only setup.
func mustRoot(t *testing.T, errs ...error) {
	t.Helper()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
}

// copyFile copies src to dst with the mode perm.
func copyFile(src, dst string, perm os.FileMode) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	return os.WriteFile(dst, b, perm)
}
