package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// `router plugin doctor -lang L`: is the toolchain of L here, and how to
// install what is missing (Debian 12 packages, as .ci/install-toolchains).

// toolCheck is one thing a language's build needs.
type toolCheck struct {
	what  string
	check func(ctx context.Context) (found string, err error)
}

// aptFix is how to install packages, with the update a fresh machine needs.
func aptFix(pkgs ...string) string {
	return "sudo apt-get update && sudo apt-get install -y " + strings.Join(pkgs, " ")
}

// langTools are each language's checks and the fix for all of them.
var langTools = map[string]struct {
	checks []toolCheck
	fix    string
}{
	"go": {[]toolCheck{{"go ≥ 1.24 (//go:wasmexport, GOOS=wasip1)", checkGo}},
		"install Go 1.24 or later from https://go.dev/dl/ (Debian 12's golang-go is 1.19, too old)"},
	"c": {[]toolCheck{
		{"clang", commandVersion("clang", "--version")},
		{"wasm-ld (lld)", commandVersion("wasm-ld", "--version")},
		{"wasi-libc", fileCheck("/usr/include/wasm32-wasi/stdlib.h", "/usr/lib/wasm32-wasi/libc.a")},
		{"compiler-rt for wasm32", clangBuiltins},
	}, aptFix("clang", "lld", "wasi-libc", "libclang-rt-14-dev-wasm32")},
	"rust": {[]toolCheck{
		{"rustc (Debian's, $RUSTC or /usr/bin/rustc)", func(ctx context.Context) (string, error) {
			return commandVersion(rustcPath(), "--version")(ctx)
		}},
		{"the wasm32 std (libstd-rust-dev-wasm32)", rustWasmStd},
		{"wasm-ld (lld)", commandVersion("wasm-ld", "--version")},
	}, aptFix("rustc", "libstd-rust-dev-wasm32", "lld")},
	"assemblyscript": {[]toolCheck{
		{"node", commandVersion("node", "--version")},
		{"npm (installs the compiler, pinned in package.json)", commandVersion("npm", "--version")},
	}, aptFix("nodejs", "npm")},
	"wat": {[]toolCheck{{"wat2wasm (wabt)", commandVersion("wat2wasm", "--version")}}, aptFix("wabt")},
}

func (c *PluginCommand) doctor(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("router plugin doctor", flag.ContinueOnError)
	fs.SetOutput(c.Stderr)
	lang := fs.String("lang", "", "the language: "+strings.Join(pluginLangs, ", "))
	if err := parseFlags(fs, args); err != nil {
		return flagError(err)
	}
	if err := checkLang(*lang, "router plugin doctor -lang %s"); err != nil {
		return err
	}
	t := langTools[*lang]
	missing := 0
	for _, ch := range t.checks {
		cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		found, err := ch.check(cctx)
		cancel()
		if err != nil {
			missing++
			fmt.Fprintf(c.Stdout, "MISSING  %s: %v\n", ch.what, err)
			continue
		}
		fmt.Fprintf(c.Stdout, "ok       %s: %s\n", ch.what, found)
	}
	if missing > 0 {
		fmt.Fprintf(c.Stdout, "\nTo install what is missing (Debian 12):\n  %s\n", t.fix)
		return &exitError{code: 1, err: fmt.Errorf("%s: %d of %d tools missing", *lang, missing, len(t.checks))}
	}
	fmt.Fprintf(c.Stdout, "\n%s: ready to build plugins\n", *lang)
	return nil
}

// commandVersion checks that name runs, and says its first line of output.
func commandVersion(name string, args ...string) func(context.Context) (string, error) {
	return func(ctx context.Context) (string, error) {
		p, err := exec.LookPath(name)
		if err != nil {
			return "", fmt.Errorf("%s is not on PATH", name)
		}
		out, err := exec.CommandContext(ctx, p, args...).CombinedOutput()
		if err != nil {
			return "", fmt.Errorf("%s %s: %v", p, strings.Join(args, " "), err)
		}
		line, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
		return p + ": " + line, nil
	}
}

func checkGo(ctx context.Context) (string, error) {
	out, err := exec.CommandContext(ctx, "go", "env", "GOVERSION").Output()
	if err != nil {
		return "", fmt.Errorf("go is not on PATH or does not run: %v", err)
	}
	v := strings.TrimSpace(string(out)) // go1.26.8
	var major, minor int
	if _, err := fmt.Sscanf(strings.TrimPrefix(v, "go"), "%d.%d", &major, &minor); err != nil || major < 1 || major == 1 && minor < 24 {
		return "", fmt.Errorf("%s is too old: plugins need go1.24 or later", v)
	}
	return v, nil
}

func fileCheck(paths ...string) func(context.Context) (string, error) {
	return func(context.Context) (string, error) {
		for _, p := range paths {
			if _, err := os.Stat(p); err != nil {
				return "", fmt.Errorf("%s not found", p)
			}
		}
		return strings.Join(paths, ", "), nil
	}
}

// clangBuiltins finds compiler-rt's wasm32 builtins, which clang links
// into every wasm32-wasi module.
func clangBuiltins(ctx context.Context) (string, error) {
	out, err := exec.CommandContext(ctx, "clang", "--target=wasm32-wasi", "-print-libgcc-file-name").Output()
	if err != nil {
		return "", fmt.Errorf("clang does not run: %v", err)
	}
	p := strings.TrimSpace(string(out))
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("%s not found", p)
	}
	return p, nil
}

func rustcPath() string {
	if p := os.Getenv("RUSTC"); p != "" {
		return p
	}
	return "/usr/bin/rustc"
}

// rustWasmStd checks that rustc has the wasm32-unknown-unknown std.
func rustWasmStd(ctx context.Context) (string, error) {
	out, err := exec.CommandContext(ctx, rustcPath(), "--print", "target-libdir", "--target", "wasm32-unknown-unknown").Output()
	if err != nil {
		return "", fmt.Errorf("%s does not run: %v", rustcPath(), err)
	}
	dir := strings.TrimSpace(string(out))
	libs, _ := filepath.Glob(filepath.Join(dir, "libstd-*.rlib"))
	if len(libs) == 0 {
		return "", fmt.Errorf("no libstd for wasm32-unknown-unknown in %s", dir)
	}
	return dir, nil
}
