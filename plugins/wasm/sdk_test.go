package wasm

import (
	"context"
	"encoding/json"
	"fmt"
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

// sdkSplitters are one plugin per SDK that splits an event in two, data
// "a" and "b", each output with an id of its own derived from the event's
// ("<id>/0", "<id>/1"), written as that SDK's README says. The builds take
// the toolchains .ci/install-toolchains installs.
var sdkSplitters = map[string]struct {
	file, src string
	build     func(t *testing.T, dir, src, out string) (skip string)
}{
	"go": {"main.go", `package main

import sdk "github.com/switchyard-router/switchyard/sdk/go"

func split(ev *sdk.Event) sdk.Verdict {
	if err := sdk.Emit(sdk.To("").WithData([]byte("a")).WithID(ev.ID + "/0")); err != nil {
		return sdk.Retry(err.Error())
	}
	if err := sdk.Emit(sdk.To("").WithData([]byte("b")).WithID(ev.ID + "/1")); err != nil {
		return sdk.Retry(err.Error())
	}
	return sdk.OK
}

func init() { sdk.Handle(split) }

func main() {}
`, buildGo},
	"rust": {"split.rs", `#[macro_use]
#[path = "SDK"]
mod switchyard;
use switchyard::{Event, Output, Verdict};

fn handle(ev: &Event) -> Verdict {
    for (i, data) in [&b"a"[..], &b"b"[..]].iter().enumerate() {
        let id = format!("{}/{}", ev.id, i);
        if let Err(e) = switchyard::emit(&Output::to("").with_data(data).with_id(&id)) {
            return switchyard::retry(&e.to_string());
        }
    }
    Verdict::Ok
}

switchyard_plugin!(handle);
`, buildRust},
	"c": {"split.c", `#include "SDK"

static int32_t handle(const sy_event *ev) {
    const char *data[2] = {"a", "b"};
    for (uint32_t i = 0; i < 2; i++) {
        sy_output_begin(SY_STR(""), SY_OUT_DATA | SY_OUT_ID);
        sy_output_data((sy_str){data[i], 1});
        sy_output_derived_id(ev->id, i);
        if (sy_output_emit() < 0) return sy_retry("output refused");
    }
    return SY_OK;
}

SY_HANDLER(handle)
`, buildC},
	"assemblyscript": {"assembly/index.ts", `import { Event, Output, Verdict, emit, onEvent, retry } from "@switchyard-router/sdk-assemblyscript/assembly";
export { sy_abi_version, sy_init, sy_handle } from "@switchyard-router/sdk-assemblyscript/assembly";

onEvent((ev: Event): Verdict => {
  if (emit(Output.to("").withDataString("a").withId(ev.id + "/0")) < 0) return retry("output refused");
  if (emit(Output.to("").withDataString("b").withId(ev.id + "/1")) < 0) return retry("output refused");
  return Verdict.Ok;
});
`, buildAssemblyScript},
}

// Every SDK gives an output the id the plugin set, and the router
// publishes the outputs under those ids (the WAT layout, by hand, is
// TestWasmOutputIDs).
func TestEverySDKGivesOutputsIDs(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a plugin with each SDK's toolchain")
	}
	for lang, p := range sdkSplitters {
		t.Run(lang, func(t *testing.T) {
			dir := t.TempDir()
			file := filepath.Join(dir, p.file)
			os.MkdirAll(filepath.Dir(file), 0o755)
			if err := os.WriteFile(file, []byte(p.src), 0o644); err != nil {
				t.Fatal(err)
			}
			out := filepath.Join(dir, "split.wasm")
			if skip := p.build(t, dir, file, out); skip != "" {
				t.Skip("SKIPPED: " + skip)
			}
			rt, _ := newTestRuntime(t, "")
			pl, err := rt.Load(context.Background(), config.Plugin{Name: "split-" + lang, Wasm: out, Limits: testLimits}, LoadOptions{Instances: 1})
			if err != nil {
				t.Fatal(err)
			}
			defer pl.Close(context.Background())
			outs, err := pl.Handle(context.Background(), testEvent("e1"))
			if err != nil {
				t.Fatal(err)
			}
			if len(outs) != 2 || outs[0].Event.ID != "e1/0" || outs[1].Event.ID != "e1/1" ||
				string(outs[0].Event.Data) != "a" || string(outs[1].Event.Data) != "b" {
				t.Fatalf("outputs %+v, want data a and b with ids e1/0 and e1/1", outs)
			}
		})
	}
}

func sdkPath(t *testing.T, rel string) string {
	p, err := filepath.Abs(filepath.Join("..", "..", "sdk", rel))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func runBuild(t *testing.T, cmd *exec.Cmd) {
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", cmd, err, b)
	}
}

func buildGo(t *testing.T, dir, _, out string) string {
	gomod := "module split\n\ngo 1.26\n\nrequire github.com/switchyard-router/switchyard/sdk/go v0.0.0\n\nreplace github.com/switchyard-router/switchyard/sdk/go => " + sdkPath(t, "go") + "\n"
	os.WriteFile(filepath.Join(dir, "go.mod"), []byte(gomod), 0o644)
	cmd := exec.Command("go", "build", "-buildmode=c-shared", "-o", out, ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm", "CGO_ENABLED=0", "GOFLAGS=")
	runBuild(t, cmd)
	return ""
}

func buildRust(t *testing.T, _, src, out string) string {
	rc := rustc(t)
	if rc == "" {
		return "no /usr/bin/rustc (or $RUSTC) with the wasm32 std on this machine; .ci/install-toolchains installs it"
	}
	b, _ := os.ReadFile(src)
	os.WriteFile(src, []byte(strings.Replace(string(b), "SDK", sdkPath(t, "rust/switchyard.rs"), 1)), 0o644)
	runBuild(t, exec.Command(rc, "--edition", "2021", "--crate-type", "cdylib", "--target", "wasm32-unknown-unknown",
		"-C", "opt-level=s", "-C", "target-feature=+bulk-memory", "-C", "linker=wasm-ld", "-o", out, src))
	return ""
}

// buildC builds freestanding (clang and lld, no wasi-libc needed).
func buildC(t *testing.T, _, src, out string) string {
	for _, tool := range []string{"clang", "wasm-ld"} {
		if _, err := exec.LookPath(tool); err != nil {
			return tool + " is not on this machine; .ci/install-toolchains installs it"
		}
	}
	b, _ := os.ReadFile(src)
	os.WriteFile(src, []byte(strings.Replace(string(b), "SDK", sdkPath(t, "c/switchyard.h"), 1)), 0o644)
	runBuild(t, exec.Command("clang", "--target=wasm32", "-nostdlib", "-ffreestanding", "-DSY_FREESTANDING", "-O2", "-mbulk-memory",
		"-fuse-ld=lld", "-Wl,--no-entry", "-Wall", "-Wextra", "-Werror", "-o", out, src))
	return ""
}

// A plugin made from the AssemblyScript template (built with its
// package.json's flags) may keep a string made during one event in a
// global and read it at the next: it is intact, and the garbage of
// thousands of events is collected. Under the stub runtime's per-event
// rewind, the template's default until now, the string was overwritten by
// the next event's allocations (here a trap; a wrong value where the bytes
// happen to make a string).
func TestAssemblyScriptTemplateKeepsWhatAGlobalHolds(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a plugin with the AssemblyScript compiler")
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "assembly", "index.ts")
	os.MkdirAll(filepath.Dir(src), 0o755)
	os.WriteFile(src, []byte(`import { Event, Output, Verdict, emit, onEvent, retry } from "@switchyard-router/sdk-assemblyscript/assembly";
export { sy_abi_version, sy_init, sy_handle } from "@switchyard-router/sdk-assemblyscript/assembly";

let previous: string = "none"; // kept across events

onEvent((ev: Event): Verdict => {
  const work = ev.type.repeat(40 * (1 + ev.subject.length)); // what a handler allocates before it reads the global, more at each event but every seventh
  if (emit(Output.to("").withDataString(previous).withId(ev.id + "/" + work.length.toString())) < 0) return retry("output refused");
  previous = ev.id + "-" + ev.subject;
  return Verdict.Ok;
});
`), 0o644)
	out := filepath.Join(dir, "keep.wasm")
	if skip := buildAssemblyScript(t, dir, src, out); skip != "" {
		t.Skip("SKIPPED: " + skip)
	}
	rt, _ := newTestRuntime(t, "")
	pl, err := rt.Load(context.Background(), config.Plugin{Name: "keep", Wasm: out, Limits: testLimits}, LoadOptions{Instances: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer pl.Close(context.Background())
	// 5,000 events leave ~25 MB of garbage: past limits.memory (16 MiB)
	// unless it is collected, and a new instance would read "none".
	want := "none"
	for i := range 5000 {
		ev := testEvent(fmt.Sprintf("event-%03d", i))
		ev.Subject = strings.Repeat("s", i%7)
		outs, err := pl.Handle(context.Background(), ev)
		if err != nil {
			t.Fatal(err)
		}
		if len(outs) != 1 || string(outs[0].Event.Data) != want {
			t.Fatalf("event %d: the global read %q, want %q", i, outs[0].Event.Data, want)
		}
		want = ev.ID + "-" + ev.Subject
	}
}

// templateASCFlags are the compiler flags of the AssemblyScript
// template's build script (sdk/templates/assemblyscript/package.json),
// without its input and output.
func templateASCFlags(t *testing.T) []string {
	b, err := os.ReadFile(sdkPath(t, "templates/assemblyscript/package.json"))
	if err != nil {
		t.Fatal(err)
	}
	var pkg struct {
		Scripts struct{ Build string } `json:"scripts"`
	}
	if err := json.Unmarshal(b, &pkg); err != nil {
		t.Fatal(err)
	}
	var flags []string
	args := strings.Fields(pkg.Scripts.Build)
	for i := 0; i < len(args); i++ {
		switch {
		case args[i] == "asc" || args[i] == "assembly/index.ts":
		case args[i] == "-o":
			i++
		default:
			flags = append(flags, args[i])
		}
	}
	return flags
}

// buildAssemblyScript builds with the template's flags, using the compiler
// examples/plugins/build.sh installs for filter-as (npm ci), whose
// node_modules links the SDK.
func buildAssemblyScript(t *testing.T, dir, src, out string) string {
	mods, err := filepath.Abs(filepath.Join("..", "..", "examples", "plugins", "filter-as", "node_modules"))
	if err != nil {
		t.Fatal(err)
	}
	asc := filepath.Join(mods, ".bin", "asc")
	if _, err := os.Stat(asc); err != nil {
		return "no AssemblyScript compiler in examples/plugins/filter-as/node_modules; examples/plugins/build.sh (run by .ci/run) installs it"
	}
	if _, err := exec.LookPath("node"); err != nil {
		return "node is not on this machine; .ci/install-toolchains installs it"
	}
	os.Symlink(mods, filepath.Join(dir, "node_modules"))
	cmd := exec.Command(asc, append([]string{src, "-o", out}, templateASCFlags(t)...)...)
	cmd.Dir = dir
	runBuild(t, cmd)
	return ""
}
