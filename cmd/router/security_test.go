package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// runBinary runs the real router binary with args and returns its exit
// error and combined output; a run still going after timeout is killed.
func runBinary(t *testing.T, timeout time.Duration, args ...string) (error, string) {
	t.Helper()
	cmd := exec.Command(routerBinary(t), args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return err, out.String()
	case <-time.After(timeout):
		cmd.Process.Kill()
		<-done
		t.Fatalf("router %v still running after %s:\n%s", args, timeout, out.String())
		return nil, ""
	}
}

// The router never deletes what stands at listen.socket unless it is a
// stale socket: a regular file or a folder there makes the real binary
// refuse to start, saying what is there, and leaves it as it was.
func TestSocketPathNotASocketIsLeftAlone(t *testing.T) {
	for _, kind := range []string{"file", "folder"} {
		t.Run(kind, func(t *testing.T) {
			path, sock := writeConfig(t, "")
			if kind == "file" {
				os.WriteFile(sock, []byte("precious"), 0o600)
			} else {
				os.Mkdir(sock, 0o700)
			}
			err, out := runBinary(t, 30*time.Second, "run", "-config", path)
			if err == nil {
				t.Fatalf("the router started with a %s at its socket path:\n%s", kind, out)
			}
			want := map[string]string{"file": "a regular file (8 bytes) is there, not a socket", "folder": "a folder is there, not a socket"}[kind]
			if !strings.Contains(out, want) || !strings.Contains(out, sock) {
				t.Errorf("the error does not say %q about %s:\n%s", want, sock, out)
			}
			fi, err := os.Lstat(sock)
			switch {
			case err != nil:
				t.Fatalf("the %s at the socket path is gone: %v", kind, err)
			case kind == "file":
				if b, _ := os.ReadFile(sock); string(b) != "precious" {
					t.Errorf("the file was changed: %q", b)
				}
			case !fi.IsDir():
				t.Errorf("the folder was replaced by %v", fi.Mode())
			}
		})
	}
}

// A socket path equal to the data file is a configuration error with its
// position, in `validate` and in `run`, and the data file stays.
func TestSocketPathIsTheDataFile(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "r.db")
	path := filepath.Join(dir, "policies.hcl")
	os.WriteFile(path, []byte("listen {\n  socket = \""+db+"\"\n}\nstorage {\n  path = \""+db+"\"\n}\n"), 0o600)
	for _, cmd := range []string{"validate", "run"} {
		err, out := runBinary(t, 30*time.Second, cmd, "-config", path)
		if err == nil {
			t.Fatalf("%s accepted the data file as the socket:\n%s", cmd, out)
		}
		if want := path + ":2:12: Socket path in use"; !strings.Contains(out, want) {
			t.Errorf("%s does not say %q:\n%s", cmd, want, out)
		}
	}
	if _, err := os.Stat(db); err == nil {
		t.Errorf("a refused config created the data file")
	}
}
