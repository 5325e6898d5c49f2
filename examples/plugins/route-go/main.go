// route-go routes each event by a number in its JSON data: events whose
// field (default "amount") is at least the threshold (default 1000) go to
// one destination (default "kafka.main:orders.large"), the others to another
// (default "nats.local:orders.small").
//
// Config (all optional):
//
//	field             = "amount"                   # top-level field of data
//	threshold         = "1000"
//	large_destination = "kafka.main:orders.large"
//	small_destination = "nats.local:orders.small"
//
// Data that is not a JSON object, or has no numeric field, is rejected
// (dead-letter queue): retrying would not change it.
package main

import (
	"encoding/json"
	"fmt"
	"strconv"

	sdk "github.com/switchyard-router/switchyard/sdk/go"
)

var (
	field     = "amount"
	threshold = 1000.0
	large     = "kafka.main:orders.large"
	small     = "nats.local:orders.small"
)

func configure(cfg map[string]string) error {
	for k, v := range cfg {
		switch k {
		case "field":
			field = v
		case "threshold":
			t, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return fmt.Errorf("route-go: threshold %q is not a number", v)
			}
			threshold = t
		case "large_destination":
			large = v
		case "small_destination":
			small = v
		default:
			return fmt.Errorf("route-go: unknown config key %q (want field, threshold, large_destination, small_destination)", k)
		}
	}
	sdk.Logf(sdk.LevelDebug, "route-go: %s >= %g -> %q, else %q", field, threshold, large, small)
	return nil
}

func route(ev *sdk.Event) sdk.Verdict {
	var data map[string]json.RawMessage
	if err := ev.JSON(&data); err != nil {
		return sdk.Reject("route-go: data is not a JSON object: " + err.Error())
	}
	raw, ok := data[field]
	if !ok {
		return sdk.Reject("route-go: data has no field " + strconv.Quote(field))
	}
	var v float64
	if err := json.Unmarshal(raw, &v); err != nil {
		return sdk.Reject("route-go: field " + strconv.Quote(field) + " is not a number")
	}
	dest := small
	if v >= threshold {
		dest = large
	}
	if err := sdk.Emit(sdk.To(dest)); err != nil {
		return sdk.Retry(err.Error())
	}
	return sdk.OK
}

func init() {
	sdk.Init(configure)
	sdk.Handle(route)
}

func main() {}
