package nats

import (
	"context"
	"fmt"
	"strings"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/switchyard-router/switchyard/config"
)

// StreamCapturing is the declared stream whose subjects capture subject
// (the subject, wildcards included, is a subset of one of the stream's
// filters), or "": a JetStream publish to a subject no stream captures is
// never acknowledged.
func StreamCapturing(streams []config.Stream, subject string) string {
	for _, st := range streams {
		for _, filter := range st.Subjects {
			if server.SubjectMatchesFilter(subject, filter) {
				return st.Name
			}
		}
	}
	return ""
}

// StreamsStoring lists the declared streams an inbox reading subject (a
// filter, wildcards allowed) would find: those whose subjects collide with
// it, as JetStream's stream listing by subject finds them (streamFor). An
// inbox needs exactly one.
func StreamsStoring(streams []config.Stream, subject string) []string {
	var out []string
	for _, st := range streams {
		for _, filter := range st.Subjects {
			if server.SubjectsCollide(subject, filter) {
				out = append(out, st.Name)
				break
			}
		}
	}
	return out
}

// Overlap is two declared streams that capture a subject both: JetStream
// refuses to create the later one ("subjects overlap with an existing
// stream"), so the router cannot start on them.
type Overlap struct {
	First, Second               string // the streams, in declared order
	FirstSubject, SecondSubject string
}

// Overlaps lists the pairs of streams whose subjects overlap, each pair
// once, at its first overlapping subjects.
func Overlaps(streams []config.Stream) []Overlap {
	var out []Overlap
	for i, a := range streams {
		for _, b := range streams[i+1:] {
			if o, ok := overlap(a, b); ok {
				out = append(out, o)
			}
		}
	}
	return out
}

func overlap(a, b config.Stream) (Overlap, bool) {
	for _, sa := range a.Subjects {
		for _, sb := range b.Subjects {
			if server.SubjectsCollide(sa, sb) {
				return Overlap{a.Name, b.Name, sa, sb}, true
			}
		}
	}
	return Overlap{}, false
}

// CheckSubjects asks the server which stream captures each subject and
// reports those none does (`router validate -check-sinks`).
func (s *Sink) CheckSubjects(ctx context.Context, subjects []string) error {
	if s.js == nil {
		return nil // core NATS: no stream needed
	}
	var missing []string
	for _, subj := range subjects {
		if _, err := s.js.StreamNameBySubject(ctx, subj); err != nil {
			missing = append(missing, fmt.Sprintf("%q (%v)", subj, err))
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("%s: no stream captures the routed subject %s: a publish there is never acknowledged; add it to a stream", s.name, strings.Join(missing, ", "))
	}
	return nil
}
