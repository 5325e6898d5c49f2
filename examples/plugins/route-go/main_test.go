package main

import (
	"testing"

	sdk "github.com/switchyard-router/switchyard/sdk/go"
)

// route-go sends an event whose field is at least the threshold to the large
// destination and the others to the small one, as one output changing
// nothing else, follows its config, rejects data without a numeric field,
// and refuses a misspelt config key.
func TestRoute(t *testing.T) {
	cases := []struct {
		cfg     map[string]string
		data    string
		verdict sdk.Verdict
		dest    string
	}{
		{nil, `{"amount": 1000}`, sdk.OK, "kafka.main:orders.large"},
		{nil, `{"amount": 999.99}`, sdk.OK, "nats.local:orders.small"},
		{map[string]string{"threshold": "10", "large_destination": "nats.local:big"}, `{"amount": 10}`, sdk.OK, "nats.local:big"},
		{map[string]string{"field": "total"}, `{"total": 1}`, sdk.OK, "nats.local:orders.small"},
		{nil, `{"amount": "12"}`, sdk.VerdictReject, ""},
		{nil, `{"other": 1}`, sdk.VerdictReject, ""},
		{nil, `[1]`, sdk.VerdictReject, ""},
	}
	for _, c := range cases {
		field, threshold, large, small = "amount", 1000, "kafka.main:orders.large", "nats.local:orders.small"
		res, err := sdk.Run(c.cfg, sdk.Event{ID: "1", Type: "order.created", Data: []byte(c.data)})
		if err != nil {
			t.Fatal(err)
		}
		if res.Verdict != c.verdict {
			t.Errorf("%s: verdict %v (%s), want %v", c.data, res.Verdict, res.Reason, c.verdict)
			continue
		}
		if c.verdict == sdk.OK && (len(res.Outputs) != 1 || res.Outputs[0].Destination != c.dest ||
			res.Outputs[0].Key != nil || res.Outputs[0].Headers != nil || res.Outputs[0].Data != nil) {
			t.Errorf("%s: outputs %+v, want one to %s", c.data, res.Outputs, c.dest)
		}
	}
	if _, err := sdk.Run(map[string]string{"treshold": "1"}, sdk.Event{}); err == nil {
		t.Error("a misspelt config key was accepted")
	}
}
