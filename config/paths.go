package config

import (
	"path/filepath"
	"strings"

	"github.com/hashicorp/hcl/v2"
)

// pathUse is what the router does with a path the configuration names.
type pathUse int

const (
	readFile    pathUse = iota // a file it reads: a tokens, password or wasm file
	writtenFile                // a file router run writes: the data file
	filledDir                  // a folder router run fills: the plugin cache, a JetStream store
)

// ownedPath is a file or folder the router reads or writes.
type ownedPath struct {
	what string // "storage.path", `the store_dir of nats "local"`
	path string
	use  pathUse
	at   hcl.Range
}

func (d *decoder) own(what, path string, use pathUse, at hcl.Range) {
	d.owned = append(d.owned, ownedPath{what, path, use, at})
}

// WrittenPath is a file or folder router run creates or writes: the data
// file, the plugin cache, an embedded NATS server's store. router validate
// checks that its user could write each.
// WhatDataFile and WhatPluginCache are the What of the data file's and
// the plugin cache's WrittenPath.
const (
	WhatDataFile    = "storage.path"
	WhatPluginCache = "the plugin cache beside storage.path"
)

type WrittenPath struct {
	What string // "storage.path", `the store_dir of nats "local"`
	Path string
	Dir  bool
	At   Pos
}

// writtenPaths are the owned paths router run writes: the data file, and
// every folder it fills.
func (d *decoder) writtenPaths() []WrittenPath {
	var out []WrittenPath
	for _, o := range d.owned {
		if o.use != readFile {
			out = append(out, WrittenPath{What: o.what, Path: o.path, Dir: o.use == filledDir, At: posOf(o.at)})
		}
	}
	return out
}

// attrOr is where a, if set, or else fallback is in the file.
func attrOr(a *hcl.Attribute, fallback hcl.Range) hcl.Range {
	if a != nil {
		return a.Expr.Range()
	}
	return fallback
}

// checkSocketPath refuses a socket path equal to, inside or above a path
// the router owns. The router replaces a stale socket at its path when it
// starts and removes the socket when it stops: at the path of the data
// file that would destroy the data. (The router also refuses at start to
// replace anything but a socket; this catches the mistake earlier, in
// `router validate`.)
func (d *decoder) checkSocketPath(socket string, fileStart hcl.Range) {
	sock, err := filepath.Abs(socket)
	if err != nil {
		return
	}
	for _, o := range d.owned {
		p, err := filepath.Abs(o.path)
		if err != nil {
			continue
		}
		var relation string
		switch {
		case p == sock:
			relation = "is the path of"
		case o.use == filledDir && within(sock, p):
			relation = "is inside"
		case within(p, sock):
			relation = "is a parent folder of"
		default:
			continue
		}
		at := o.at
		if d.socketAt != nil {
			at = *d.socketAt
		}
		d.errorf(at, "Socket path in use",
			"listen.socket %q %s %s (%q): the router creates and removes its socket there. Give the socket a path of its own, such as \"./data/router.sock\".",
			socket, relation, o.what, o.path)
	}
}

// within reports whether path is below dir.
func within(path, dir string) bool {
	return strings.HasPrefix(path, dir+string(filepath.Separator))
}
