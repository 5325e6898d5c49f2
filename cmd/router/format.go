package main

import (
	"flag"
	"fmt"
	"slices"
	"strings"
)

// format is how a command writes what it prints: a table or text for a
// person to read, JSON for a program. Each flag that picks one (-o,
// -log-format) takes only the formats its command writes, and refuses any
// other as its flags are read: `-o yaml` is an error, not a table.
type format string

const (
	formatTable format = "table"
	formatText  format = "text"
	formatJSON  format = "json"
)

// formatVar defines the flag name on fs, taking one of formats; the first
// is its default. Its usage reads "the format of the <of>: table or json".
func formatVar(fs *flag.FlagSet, p *format, name, of string, formats ...format) {
	*p = formats[0]
	fs.Var(&formatFlag{p: p, formats: formats}, name, fmt.Sprintf("the `format` of the %s: %s", of, formatNames(formats)))
}

// formatFlag is the flag.Value behind formatVar.
type formatFlag struct {
	p       *format
	formats []format
}

func (f *formatFlag) String() string {
	if f.p == nil { // the flag package's zero value, for its usage text
		return ""
	}
	return string(*f.p)
}

func (f *formatFlag) Set(s string) error {
	if err := checkFormat(format(s), f.formats...); err != nil {
		return err
	}
	*f.p = format(s)
	return nil
}

// checkFormat says which formats to use when f is not one of them.
func checkFormat(f format, formats ...format) error {
	if slices.Contains(formats, f) {
		return nil
	}
	return fmt.Errorf("use %s", formatNames(formats))
}

func formatNames(formats []format) string {
	names := make([]string, len(formats))
	for i, f := range formats {
		names[i] = string(f)
	}
	return strings.Join(names, " or ")
}
