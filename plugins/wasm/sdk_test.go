package wasm

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/switchyard-router/switchyard/config"
)

// rustc is Debian's compiler with the wasm32 std (.ci/install-toolchains
// installs it); "" when this machine has none.
func rustc(t *testing.T) string {
	for _, p := range []string{os.Getenv("RUSTC"), "/usr/bin/rustc"} {
		if p == "" {
			continue
		}
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return ""
}

// A Rust plugin built with the SDK that panics keeps the panic's message
// and place in the reason (the SDK's panic hook calls fail() before the
// trap), and the recommended build (strip=debuginfo) keeps the function
// names in the trap's frames.
func TestRustSDKPanicKeepsItsMessage(t *testing.T) {
	rc := rustc(t)
	if rc == "" {
		t.Skip("SKIPPED: no /usr/bin/rustc (or $RUSTC) with the wasm32 std on this machine; .ci/install-toolchains installs it")
	}
	sdk, err := filepath.Abs(filepath.Join("..", "..", "sdk", "rust", "switchyard.rs"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	src := `#[macro_use]
#[path = "` + sdk + `"]
mod switchyard;
use switchyard::{Event, Verdict};

fn parse_amount(ev: &Event) -> u32 {
    let digits: Vec<u32> = ev.data.iter().map(|b| (*b as u32) - 48).collect();
    digits[7] // past the end for short data: panics
}

fn handle(ev: &Event) -> Verdict {
    if parse_amount(ev) > 10 { Verdict::Ok } else { Verdict::Ok }
}

switchyard_plugin!(handle);
`
	os.WriteFile(filepath.Join(dir, "panics.rs"), []byte(src), 0o644)
	out := filepath.Join(dir, "panics.wasm")
	cmd := exec.Command(rc, "--edition", "2021", "--crate-type", "cdylib", "--target", "wasm32-unknown-unknown",
		"-C", "opt-level=s", "-C", "lto", "-C", "codegen-units=1", "-C", "strip=debuginfo", "-C", "target-feature=+bulk-memory", "-C", "linker=wasm-ld",
		"-o", out, filepath.Join(dir, "panics.rs"))
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", cmd, err, b)
	}
	rt, _ := newTestRuntime(t, "")
	p, err := rt.Load(context.Background(), config.Plugin{Name: "panics", Wasm: out, Limits: testLimits}, LoadOptions{Instances: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(context.Background())
	ev := testEvent("e1")
	ev.Data = []byte("12")
	_, err = p.Handle(context.Background(), ev)
	pe := mustRetry(t, err, "e1", "sy_handle trapped")
	if !strings.Contains(pe.Reason, "the plugin said: panicked at") || !strings.Contains(pe.Reason, "index out of bounds") || !strings.Contains(pe.Reason, "panics.rs") {
		t.Fatalf("reason %q: want the panic's message and place", pe.Reason)
	}
	// The plugin's functions are inlined into sy_handle here; what must hold
	// is that the frames have names (strip=debuginfo keeps them), not $N.
	if !strings.Contains(pe.Reason, "(at sy_handle") && !strings.Contains(pe.Reason, "(at panics::") || strings.Contains(pe.Reason, "(at $") {
		t.Errorf("reason %q: want the frames by name (strip=debuginfo keeps them)", pe.Reason)
	}
	t.Log(pe.Reason)
}
