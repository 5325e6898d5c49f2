package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// walkthroughBlocks are the ```sh walkthrough blocks of a README, in order.
func walkthroughBlocks(t *testing.T, readme string) []string {
	t.Helper()
	b, err := os.ReadFile(readme)
	if err != nil {
		t.Fatal(err)
	}
	var blocks []string
	for _, m := range regexp.MustCompile("(?ms)^```sh walkthrough\n(.*?)^```").FindAllStringSubmatch(string(b), -1) {
		blocks = append(blocks, m[1])
	}
	return blocks
}

// Each SDK README's walkthrough works as written: its ```sh walkthrough
// blocks run, in order, in one shell started in the repository's root with
// an empty HOME — build the router, init a plugin, check the toolchain,
// build, run the golden tests, run a router on the folder's policies.hcl and
// post the sample event — and the event comes out delivered to the stream.
// The README cannot drift from what works. A language whose toolchain this
// machine lacks is skipped, saying so.
func TestSDKReadmeWalkthroughs(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the router and a plugin per language, runs the router")
	}
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	goEnv := map[string]string{}
	for _, k := range []string{"GOCACHE", "GOMODCACHE", "GOPATH", "GOROOT"} {
		out, err := exec.Command("go", "env", k).Output()
		if err != nil {
			t.Fatal(err)
		}
		goEnv[k] = strings.TrimSpace(string(out))
	}
	for _, lang := range pluginLangs {
		t.Run(lang, func(t *testing.T) {
			if out, err := exec.Command(routerBinary(t), "plugin", "doctor", "-lang", lang).CombinedOutput(); err != nil {
				t.Skipf("SKIPPED: the %s toolchain is not here (.ci/install-toolchains installs it):\n%s", lang, out)
			}
			blocks := walkthroughBlocks(t, filepath.Join(root, "sdk", lang, "README.md"))
			if len(blocks) < 4 {
				t.Fatalf("sdk/%s/README.md has %d walkthrough blocks, want the 4 steps", lang, len(blocks))
			}
			script := "set -euo pipefail\n" + strings.Join(blocks, "\n")
			cmd := exec.Command("bash", "-c", script)
			cmd.Dir = root
			home := t.TempDir()
			cmd.Env = append(os.Environ(), "HOME="+home)
			for k, v := range goEnv {
				cmd.Env = append(cmd.Env, k+"="+v) // the caches, not a cold build under the new HOME
			}
			out, err := cmd.CombinedOutput()
			if err != nil {
				log, _ := os.ReadFile(filepath.Join(home, "hello", "router.log"))
				t.Fatalf("the walkthrough of sdk/%s/README.md failed: %v\n%s\nrouter.log:\n%s", lang, err, out, log)
			}
			for _, want := range []string{"ready to build plugins", "ok: 2 cases", `"status":"accepted"`, `"state": "delivered"`, `"stream": "demo"`} {
				if !strings.Contains(string(out), want) {
					t.Fatalf("the walkthrough of sdk/%s/README.md did not print %q:\n%s", lang, want, out)
				}
			}
		})
	}
}
