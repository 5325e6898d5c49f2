package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// fencedBlocks are a README's fenced code blocks whose info string is info
// ("sh", "sh walkthrough"), in order.
func fencedBlocks(t *testing.T, readme, info string) []string {
	t.Helper()
	b, err := os.ReadFile(readme)
	if err != nil {
		t.Fatal(err)
	}
	var blocks []string
	for _, m := range regexp.MustCompile("(?ms)^```"+regexp.QuoteMeta(info)+"\n(.*?)^```").FindAllStringSubmatch(string(b), -1) {
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
	root := repoRoot(t)
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
			blocks := fencedBlocks(t, filepath.Join(root, "sdk", lang, "README.md"), "sh walkthrough")
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
			for _, want := range []string{"ready to build plugins", "ok: 3 cases", `"status":"accepted"`, `"state": "delivered"`, `"stream": "demo"`} {
				if !strings.Contains(string(out), want) {
					t.Fatalf("the walkthrough of sdk/%s/README.md did not print %q:\n%s", lang, want, out)
				}
			}
		})
	}
}

// repoRoot is the repository's root (tests run in cmd/router).
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// exampleLangs maps each example plugin to the language whose toolchain it
// needs (router plugin doctor -lang).
var exampleLangs = map[string]string{
	"route-go": "go", "onchange-go": "go", "enrich-c": "c", "filter-as": "assemblyscript",
	"split-rust": "rust", "threshold-rust": "rust", "passthrough-wat": "wat",
}

// Each example plugin's README works as written: its ```sh blocks (build,
// then try it) run in order, in one shell, from the root of a copy of the
// example and the SDKs, with the router on PATH, and every `router plugin
// test` in them passes. The copy keeps the committed modules out of reach;
// build.sh --check is what compares them. A language whose toolchain this
// machine lacks is skipped, saying so.
func TestExampleReadmes(t *testing.T) {
	if testing.Short() {
		t.Skip("builds each example plugin from its README")
	}
	root := repoRoot(t)
	router := routerBinary(t)
	dirs, err := os.ReadDir(filepath.Join(root, "examples", "plugins"))
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range dirs {
		if !d.IsDir() {
			continue
		}
		name := d.Name()
		lang, ok := exampleLangs[name]
		if !ok {
			t.Errorf("examples/plugins/%s: not in exampleLangs, so its README is not tried", name)
			continue
		}
		t.Run(name, func(t *testing.T) {
			if out, err := exec.Command(router, "plugin", "doctor", "-lang", lang).CombinedOutput(); err != nil {
				t.Skipf("SKIPPED: the %s toolchain is not here (.ci/install-toolchains installs it):\n%s", lang, out)
			}
			tmp := t.TempDir()
			for _, dir := range []string{"sdk", filepath.Join("examples", "plugins", name)} {
				copyTree(t, filepath.Join(root, dir), filepath.Join(tmp, dir))
			}
			readme := filepath.Join(root, "examples", "plugins", name, "README.md")
			blocks := fencedBlocks(t, readme, "sh")
			if len(blocks) < 2 {
				t.Fatalf("%s has %d sh blocks, want a build and a try-it", readme, len(blocks))
			}
			cmd := exec.Command("bash", "-c", "set -euo pipefail\n"+strings.Join(blocks, "\n"))
			cmd.Dir = tmp
			cmd.Env = append(os.Environ(), "PATH="+filepath.Dir(router)+string(os.PathListSeparator)+os.Getenv("PATH"),
				"TMPDIR="+t.TempDir()) // what the blocks write beside the example
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("the sh blocks of %s failed: %v\n%s", readme, err, out)
			}
			if !strings.Contains(string(out), `"verdict": "ok"`) {
				t.Fatalf("the sh blocks of %s tested no plugin:\n%s", readme, out)
			}
		})
	}
}

// copyTree copies the regular files under src to dst, leaving out
// node_modules (a README's npm ci makes it again).
func copyTree(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		switch {
		case d.IsDir() && d.Name() == "node_modules":
			return filepath.SkipDir
		case d.IsDir():
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		case !d.Type().IsRegular():
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), b, info.Mode().Perm())
	})
	if err != nil {
		t.Fatal(err)
	}
}
