// onchange-go forwards a reading only when it differs from the last one
// forwarded for its key (the event's partition key, else its subject), and
// filters the repeats. The last reading per key lives in the plugin's state
// (docs/plugin-state.md), so it survives restarts and counts once per event
// outcome.
//
// Config (optional): ttl = "3600" seconds after which a key is forgotten
// (and its next reading forwarded again); default: never.
package main

import (
	"bytes"
	"errors"
	"strconv"
	"time"

	sdk "github.com/switchyard-router/switchyard/sdk/go"
)

var ttl time.Duration

func init() {
	sdk.Init(func(cfg map[string]string) error {
		if s := cfg["ttl"]; s != "" {
			n, err := strconv.Atoi(s)
			if err != nil || n < 0 {
				return errors.New("onchange: ttl must be a number of seconds, got " + strconv.Quote(s))
			}
			ttl = time.Duration(n) * time.Second
		}
		return nil
	})
	sdk.Handle(handle)
}

func handle(ev *sdk.Event) sdk.Verdict {
	key := ev.Key
	if key == "" {
		key = ev.Subject
	}
	if key == "" {
		return sdk.Reject("onchange: the event has neither a partition key nor a subject to compare readings by")
	}
	last, ok, err := sdk.StateGet([]byte(key))
	if err != nil {
		return sdk.Retry(err.Error())
	}
	if ok && bytes.Equal(last, ev.Data) {
		return sdk.OK // the same as last time: filtered
	}
	if err := sdk.StatePut([]byte(key), ev.Data, ttl); err != nil {
		return sdk.Retry(err.Error())
	}
	if err := sdk.Forward(); err != nil {
		return sdk.Reject(err.Error())
	}
	return sdk.OK
}

func main() {}
