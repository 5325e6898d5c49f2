package main

import (
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/switchyard-router/switchyard/sdk"
	sdkgo "github.com/switchyard-router/switchyard/sdk/go"
)

// `router plugin init -lang L NAME` writes a folder that builds and runs as
// it is: the plugin's source (sdk/templates/L), the SDK beside it, a
// build.sh, golden tests (testdata/*.event.json with their expected
// results), a policies.hcl for a router of its own, and a README with the
// commands. `router plugin doctor -lang L` checks the toolchain. Why the
// SDK is copied into the folder: docs/decisions/plugin-init.md.

// pluginLangs are the languages init knows, in the order help lists them.
var pluginLangs = []string{"go", "c", "rust", "assemblyscript", "wat"}

// checkLang refuses a -lang that is not one of pluginLangs, naming it, and
// shows usage (a format with %s for the languages).
func checkLang(lang, usage string) error {
	if slices.Contains(pluginLangs, lang) {
		return nil
	}
	what := fmt.Sprintf("unknown language %q", lang)
	if lang == "" {
		what = "name the language"
	}
	return &exitError{code: pluginExitError, err: fmt.Errorf("%s: "+usage, what, strings.Join(pluginLangs, "|"))}
}

// sdkCopies says where each language's SDK goes in the new folder.
var sdkCopies = map[string][]struct {
	fsys     fs.FS
	from, to string
}{
	"go":   {{sdkgo.Source, ".", "switchyard-sdk-go"}},
	"c":    {{sdk.Files, "c/switchyard.h", "switchyard.h"}},
	"rust": {{sdk.Files, "rust/switchyard.rs", "switchyard.rs"}},
	"assemblyscript": {
		{sdk.Files, "assemblyscript/package.json", "switchyard-sdk-assemblyscript/package.json"},
		{sdk.Files, "assemblyscript/assembly/index.ts", "switchyard-sdk-assemblyscript/assembly/index.ts"},
	},
	"wat": nil,
}

var validPluginName = regexp.MustCompile(`^[a-z][a-z0-9_-]{0,62}$`).MatchString

func (c *PluginCommand) init(args []string) error {
	fs := flag.NewFlagSet("router plugin init", flag.ContinueOnError)
	fs.SetOutput(c.Stderr)
	lang := fs.String("lang", "", "the plugin's language: "+strings.Join(pluginLangs, ", "))
	dir := fs.String("dir", "", "the folder to create (default ./NAME)")
	port := fs.Int("port", 0, "the embedded NATS server's port in policies.hcl (default: a port free now)")
	rest, err := parseInterspersed(fs, args)
	if err != nil {
		return flagError(err)
	}
	usage := "router plugin init -lang %s NAME"
	if err := checkLang(*lang, usage); err != nil {
		return err
	}
	if len(rest) != 1 {
		return &exitError{code: pluginExitError, err: fmt.Errorf("name one plugin (given %d: %q): "+usage, len(rest), rest, strings.Join(pluginLangs, "|"))}
	}
	name := rest[0]
	if !validPluginName(name) {
		return &exitError{code: pluginExitError, err: fmt.Errorf("plugin name %q: use lower-case letters, digits, - and _, starting with a letter", name)}
	}
	if *dir == "" {
		*dir = name
	}
	if entries, err := os.ReadDir(*dir); err == nil && len(entries) > 0 {
		return &exitError{code: pluginExitError, err: fmt.Errorf("%s exists and is not empty: init writes into a new folder", *dir)}
	}
	if *port == 0 {
		if *port, err = freeTCPPort(); err != nil {
			return &exitError{code: pluginExitError, err: err}
		}
	}
	vars := strings.NewReplacer("__NAME__", name, "__LANG__", *lang, "__PORT__", strconv.Itoa(*port),
		"__WATNOTE__", map[bool]string{true: "; in WAT the event goes on unchanged", false: ""}[*lang == "wat"])
	if err := writeTemplate(*dir, "templates/common", vars); err != nil {
		return &exitError{code: pluginExitError, err: err}
	}
	if err := writeTemplate(*dir, "templates/"+*lang, vars); err != nil {
		return &exitError{code: pluginExitError, err: err}
	}
	for _, cp := range sdkCopies[*lang] {
		if err := copyFS(cp.fsys, cp.from, filepath.Join(*dir, cp.to)); err != nil {
			return &exitError{code: pluginExitError, err: err}
		}
	}
	fmt.Fprintf(c.Stdout, "wrote %s/ (a plugin in %s; its README has the commands):\n  cd %s\n  router plugin doctor -lang %s\n  ./build.sh\n  router plugin test %s.wasm -dir testdata -config greeting=hello\n  router run -config policies.hcl\n",
		*dir, *lang, *dir, *lang, name)
	return nil
}

// writeTemplate writes every file under root of sdk.Files into dir, names
// without ".tmpl", text with vars replaced; build.sh is executable.
func writeTemplate(dir, root string, vars *strings.Replacer) error {
	return fs.WalkDir(sdk.Files, root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(sdk.Files, p)
		if err != nil {
			return err
		}
		rel := strings.TrimSuffix(strings.TrimPrefix(p, root+"/"), ".tmpl")
		mode := os.FileMode(0o644)
		if path.Base(rel) == "build.sh" {
			mode = 0o755
		}
		return writeFile(filepath.Join(dir, filepath.FromSlash(rel)), []byte(vars.Replace(string(b))), mode)
	})
}

// copyFS copies the file from of fsys to the path to, or the tree from
// into the folder to.
func copyFS(fsys fs.FS, from, to string) error {
	return fs.WalkDir(fsys, from, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(fsys, p)
		if err != nil {
			return err
		}
		dest := to
		if p != from { // in a tree
			rel := p
			if from != "." {
				rel = strings.TrimPrefix(p, from+"/")
			}
			dest = filepath.Join(to, filepath.FromSlash(rel))
		}
		return writeFile(dest, b, 0o644)
	})
}

func writeFile(p string, b []byte, mode os.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	return os.WriteFile(p, b, mode)
}

// freeTCPPort is a loopback port nothing listens on now.
func freeTCPPort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, errors.New("no free port for the embedded NATS server: pass -port")
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}
