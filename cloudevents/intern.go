package cloudevents

// interner hands out again the strings a batch's earlier events already
// had: the events of one batch mostly share their specversion, source,
// type, datacontenttype and extension names, and each of those was a new
// string per event (issue 14: allocations were a fifth of the CPU of
// batched ingest). It remembers the last value of each attribute and the
// member names it has seen, a few of each; a nil interner (one event)
// still returns the one value every event has, specversion 1.0, without
// allocating.
type interner struct {
	names  [16]string
	values [16]struct{ name, value string }
	nNames int
	nVals  int
}

// intern returns raw as a string: a remembered one when raw equals it. An
// empty name asks for a member name; otherwise raw is the value of the
// attribute name. Ids and times differ from event to event and are not
// remembered.
func (in *interner) intern(name string, raw []byte) string {
	if name == AttrSpecVersion && string(raw) == "1.0" {
		return "1.0"
	}
	if in == nil || name == AttrID || name == AttrTime {
		return string(raw)
	}
	if name == "" {
		return in.name(raw)
	}
	for i := range in.nVals {
		v := &in.values[i]
		if v.name == name {
			if v.value != string(raw) {
				v.value = string(raw)
			}
			return v.value
		}
	}
	s := string(raw)
	if in.nVals < len(in.values) {
		in.values[in.nVals] = struct{ name, value string }{name, s}
		in.nVals++
	}
	return s
}

// name returns a member name, remembered among the first few seen.
func (in *interner) name(raw []byte) string {
	for _, n := range in.names[:in.nNames] {
		if n == string(raw) {
			return n
		}
	}
	s := string(raw)
	if in.nNames < len(in.names) {
		in.names[in.nNames] = s
		in.nNames++
	}
	return s
}
