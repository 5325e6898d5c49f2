package testkit

import (
	"bytes"
	"context"
	"sort"
	"strings"
	"testing"

	"github.com/cloudevents/sdk-go/v2/binding"
	"github.com/cloudevents/sdk-go/v2/binding/format"
	"github.com/cloudevents/sdk-go/v2/binding/spec"
	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/cloudevents/sdk-go/v2/types"

	"github.com/switchyard-router/switchyard"
)

// The official CloudEvents Go SDK, as the independent implementation the
// router's codec is checked against (docs/decisions/cloudevents-codec.md).

// FromSDK is the SDK's event in the router's model.
func FromSDK(t *testing.T, e *event.Event) switchyard.Event {
	t.Helper()
	ev := switchyard.Event{
		SpecVersion: e.SpecVersion(), ID: e.ID(), Source: e.Source(), Type: e.Type(),
		Subject: e.Subject(), Time: e.Time(), DataContentType: e.DataContentType(), DataSchema: e.DataSchema(),
	}
	for name, v := range e.Extensions() {
		s, err := types.Format(v)
		if err != nil {
			t.Fatalf("extension %s: %v", name, err)
		}
		ev.Extensions = append(ev.Extensions, switchyard.Header{Name: name, Value: s})
	}
	sort.Slice(ev.Extensions, func(i, j int) bool { return ev.Extensions[i].Name < ev.Extensions[j].Name })
	if len(e.Data()) > 0 {
		ev.Data = e.Data()
	}
	return ev
}

// SDKHeaderMessage is a message with the given headers and body as the
// SDK's Kafka (prefix "ce_") and NATS ("ce-") bindings read it. Those
// bindings are separate modules (protocol/kafka_sarama,
// protocol/nats_jetstream) that the module proxy here does not serve; this
// re-states their header readers over the SDK's own binding machinery
// (spec.Versions attribute lookup, the event builder, its type checks), so
// binding.ToEvent on it is the SDK's reading.
func SDKHeaderMessage(prefix string, headers []switchyard.Header, body []byte) binding.Message {
	return &sdkHeaderMessage{specs: spec.WithPrefix(prefix), headers: headers, body: body}
}

// sdkHeaderMessage is a binary- or structured-mode message as the SDK's
// Kafka and NATS bindings read it: <prefix>* headers are attributes or
// extensions, content-type is datacontenttype, values as they are.
type sdkHeaderMessage struct {
	specs   *spec.Versions
	headers []switchyard.Header
	body    []byte
}

func (m *sdkHeaderMessage) get(name string) string {
	for _, h := range m.headers {
		if h.Name == name {
			return h.Value
		}
	}
	return ""
}

func (m *sdkHeaderMessage) ReadEncoding() binding.Encoding {
	if m.get(m.specs.PrefixedSpecVersionName()) != "" {
		return binding.EncodingBinary
	}
	return binding.EncodingStructured
}

func (m *sdkHeaderMessage) ReadStructured(ctx context.Context, w binding.StructuredWriter) error {
	if m.ReadEncoding() != binding.EncodingStructured {
		return binding.ErrNotStructured
	}
	return w.SetStructuredEvent(ctx, format.JSON, bytes.NewReader(m.body))
}

func (m *sdkHeaderMessage) ReadBinary(ctx context.Context, w binding.BinaryWriter) error {
	if m.ReadEncoding() != binding.EncodingBinary {
		return binding.ErrNotBinary
	}
	version := m.specs.Version(m.get(m.specs.PrefixedSpecVersionName()))
	for _, h := range m.headers {
		var err error
		switch {
		case strings.HasPrefix(h.Name, m.specs.Prefix()):
			if attr := version.Attribute(h.Name); attr != nil {
				err = w.SetAttribute(attr, h.Value)
			} else {
				err = w.SetExtension(strings.TrimPrefix(h.Name, m.specs.Prefix()), h.Value)
			}
		case h.Name == "content-type":
			err = w.SetAttribute(version.AttributeFromKind(spec.DataContentType), h.Value)
		}
		if err != nil {
			return err
		}
	}
	if m.body != nil {
		return w.SetData(bytes.NewReader(m.body))
	}
	return nil
}

func (m *sdkHeaderMessage) Finish(error) error { return nil }

func (m *sdkHeaderMessage) GetAttribute(k spec.Kind) (spec.Attribute, interface{}) {
	version := m.specs.Version(m.get(m.specs.PrefixedSpecVersionName()))
	attr := version.AttributeFromKind(k)
	if v := m.get(attr.PrefixedName()); v != "" {
		return attr, v
	}
	return attr, nil
}

func (m *sdkHeaderMessage) GetExtension(name string) interface{} {
	if v := m.get(m.specs.Prefix() + name); v != "" {
		return v
	}
	return nil
}
