//go:build unix

package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// A tokens file root owns may be read by the router's group (root:group
// 0640, PostgreSQL's rule for its key), not changed by it nor read by
// others: checked with router validate run as another user, on real files.
// It needs root, to own the file and to run the router as someone else.
func TestRootsSecretMayBeReadByTheGroup(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("skipped: needs root, to make a root-owned key and run the router as another user")
	}
	const nobody = 65534
	base, err := os.MkdirTemp("", "secret-group-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	data := filepath.Join(base, "data")
	bin := filepath.Join(base, "router")
	mustRoot(t, os.Chmod(base, 0o755), os.Mkdir(data, 0o700), os.Chown(data, nobody, nobody), copyFile(routerBinary(t), bin, 0o755))
	tokens := filepath.Join(base, "tokens.json")
	mustRoot(t, os.WriteFile(tokens, []byte(`{"tokens":[{"token":"a-long-random-secret-for-acme","tenant":"acme"}]}`), 0o600),
		os.Chown(tokens, 0, nobody))
	config := filepath.Join(base, "policies.hcl")
	mustRoot(t, os.WriteFile(config, []byte(fmt.Sprintf("listen {\n  socket      = %q\n  http        = \"127.0.0.1:0\"\n  tokens_file = %q\n}\nstorage { path = %q }\n",
		filepath.Join(data, "r.sock"), tokens, filepath.Join(data, "r.db"))), 0o644))
	validate := func(mode os.FileMode) (string, error) {
		if err := os.Chmod(tokens, mode); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(bin, "validate", "-config", config)
		cmd.Dir = data
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	for _, mode := range []os.FileMode{0o640, 0o440} {
		if out, err := validate(mode); err != nil {
			t.Errorf("mode %04o, root:nobody: validate as nobody: %v\n%s", mode, err, out)
		}
	}
	for _, mode := range []os.FileMode{0o660, 0o644, 0o604} {
		out, err := validate(mode)
		if err == nil || !strings.Contains(out, ":4:17: tokens_file: "+tokens) || !strings.Contains(out, "chmod 640 "+tokens) {
			t.Errorf("mode %04o, root:nobody: validate as nobody passed or did not say chmod 640: %v\n%s", mode, err, out)
		}
	}
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
