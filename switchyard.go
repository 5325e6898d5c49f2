// Package switchyard holds what the binary takes from the repository root:
// the shipped policies.hcl, so that `router run` works with no file at all
// and the defaults a user reads are the defaults the router runs.
package switchyard

import _ "embed"

// Policies is the shipped policies.hcl.
//
//go:embed policies.hcl
var Policies []byte
