// Package sdk holds what `router plugin init` writes into a new plugin's
// folder: a template per language (templates/) and the guest SDKs it copies
// beside the source, so the folder builds on its own. The Go SDK is a module
// of its own (sdk/go) and embeds its own sources (sdk/go/source.go).
package sdk

import "embed"

// Files are the templates and the SDK sources of C, Rust, AssemblyScript
// and WAT.
//
//go:embed templates c/switchyard.h rust/switchyard.rs wat/template.wat assemblyscript/package.json assemblyscript/assembly/index.ts
var Files embed.FS
