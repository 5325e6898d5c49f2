package main

import (
	"errors"
	"flag"
	"time"
)

// durationVar defines the duration flag name on fs, whose bad value is
// told with the form a duration takes: the flag package said only "parse
// error" (`-shutdown-timeout 30`, a new user's try).
func durationVar(fs *flag.FlagSet, p *time.Duration, name string, value time.Duration, usage string) {
	*p = value
	fs.Var((*durationFlag)(p), name, usage+" (a `duration`: 30s, 500ms, 2m)")
}

// durationFlag is the flag.Value behind durationVar.
type durationFlag time.Duration

func (d *durationFlag) String() string {
	if d == nil { // the flag package's zero value, for its usage text
		return ""
	}
	return time.Duration(*d).String()
}

func (d *durationFlag) Set(s string) error {
	v, err := time.ParseDuration(s)
	if err != nil {
		return errors.New("a duration is a number with its unit: 30s, 500ms, 2m, 1h")
	}
	*d = durationFlag(v)
	return nil
}
