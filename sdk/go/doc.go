// Package sdk is the Go guest SDK for Switchyard plugins (plugin ABI v1).
//
// A plugin is a package main built for wasip1 as a reactor:
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -trimpath -buildvcs=false -o x.wasm .
//
// It registers its callbacks from an init function (main is never called in
// a reactor, but it must exist):
//
//	package main
//
//	import sdk "github.com/switchyard-router/switchyard/sdk/go"
//
//	func init() {
//		sdk.Handle(func(ev *sdk.Event) sdk.Verdict {
//			if err := sdk.Forward(); err != nil {
//				return sdk.Retry(err.Error())
//			}
//			return sdk.OK
//		})
//	}
//
//	func main() {}
//
// The package exports sy_abi_version, sy_init and sy_handle itself (with
// //go:wasmexport) and imports switchyard.input_read, emit, fail and log
// (with //go:wasmimport). Outside wasip1 those imports are simulated in
// memory, so a plugin's logic can be unit-tested with a plain `go test` and
// [Run].
//
// Handlers run one at a time, never concurrently, and must not block (no
// channels waiting on other goroutines, no time.Sleep): the router calls
// sy_handle synchronously and a blocked Go reactor cannot return.
package sdk
