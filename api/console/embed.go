// Package console holds the operator console's files: plain HTML, CSS and
// JavaScript, embedded in the binary, with no build step and no library
// (docs/decisions/console.md). The router serves them at /ui/; everything
// the pages show comes from the admin API, with the operator's bearer
// token, so the files hold nothing secret.
package console

import (
	"embed"
	"io/fs"
)

//go:embed static
var files embed.FS

// FS is the console's files, index.html at its root.
func FS() fs.FS {
	sub, err := fs.Sub(files, "static")
	if err != nil {
		panic(err) // the directory is embedded: it exists
	}
	return sub
}
