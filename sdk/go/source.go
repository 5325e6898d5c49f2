//go:build !wasip1

package sdk

import "embed"

// Source is this SDK's own source, for `router plugin init -lang go`, which
// copies it into the new plugin's folder (the SDK is not published on a
// module proxy yet): every file of the package but this one and its tests
// (check.go was left out, and an init'd folder's `go test` did not compile:
// cmd/router's TestPluginInitEveryLanguage vets one now). Not built into
// plugins (wasip1).
//
//go:embed go.mod sdk.go envelope.go check.go abi_wasip1.go abi_other.go doc.go
var Source embed.FS
