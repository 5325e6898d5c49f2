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
