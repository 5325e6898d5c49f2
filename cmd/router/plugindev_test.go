package main

import "testing"

// router plugin dev rebuilds for the author's sources and build files,
// not for what the build, the router or a redirected command writes into
// the folder (a tail into tail.out rebuilt the plugin at each event).
func TestDevSkipsOutputsNotSources(t *testing.T) {
	for rel, skip := range map[string]bool{
		"plugin.rs": false, "stamp.c": false, "switchyard.h": false, "build.sh": false,
		"Cargo.toml": false, "assembly/index.ts": false, "notes.txt": false, "testdata/a.event.json": false,
		"hello.wasm": true, "router.log": true, "tail.out": true, "x.tmp": true, "plugin.rs~": true,
		".plugin.rs.swp": true,
	} {
		if got := devSkip(rel, false); got != skip {
			t.Errorf("devSkip(%q) = %v, want %v", rel, got, skip)
		}
	}
	for _, dir := range []string{"data", "target", "node_modules", ".git"} {
		if !devSkip(dir, true) {
			t.Errorf("the folder %s is watched", dir)
		}
	}
}
