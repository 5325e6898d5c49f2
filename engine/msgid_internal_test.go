package engine

import (
	"testing"

	"github.com/switchyard-router/switchyard"
	"github.com/switchyard-router/switchyard/storage"
)

// An inbox's output recorded as delivered under the id it had before its
// record's MsgID encoded source and id whole counts as delivered, and is
// not sent again; its other output, never delivered, is (a review: a
// split event's delivered outputs went out again after an upgrade).
func TestAnInboxOutputDeliveredUnderItsOldIDIsNotSentAgain(t *testing.T) {
	const dest = "inbox.pay:deliver"
	rec := &storage.Record{Event: switchyard.Event{ID: "x y", Source: "/a"}, Queue: "inbox:pay",
		Outputs: []storage.Output{{Destination: dest, MsgID: "/a#x y/1/", Delivered: true}}}
	if !outputDelivered(rec, dest, rec.OutputMsgID(1), 1) {
		t.Errorf("output 1, delivered as %q, is taken for undelivered (now %q)", rec.Outputs[0].MsgID, rec.OutputMsgID(1))
	}
	if outputDelivered(rec, dest, rec.OutputMsgID(0), 0) {
		t.Error("output 0, never delivered, is taken for delivered")
	}
	// The older form of a later output's id, "<id>-<n>", under the old id.
	rec.Outputs = []storage.Output{{Destination: dest, MsgID: "/a#x y-2", Delivered: true}}
	if !outputDelivered(rec, dest, rec.OutputMsgID(2), 2) {
		t.Errorf("output 2, delivered as %q, is taken for undelivered", rec.Outputs[0].MsgID)
	}
}
