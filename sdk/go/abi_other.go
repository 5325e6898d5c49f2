//go:build !wasip1

package sdk

import "fmt"

// Outside wasip1 the host imports are simulated in memory, so that plugin
// logic can be unit-tested with `go test` on the developer's machine.

var sim simHost

// simHost is the simulated router of one Run.
type simHost struct {
	input   []byte
	outputs []Output
	reason  string
	logs    []LogLine
	err     error
	state   map[string][]byte // the plugin's state: kept across Run calls until ResetState
}

// refuse keeps the first refusal of a Run, which Run returns.
func (s *simHost) refuse(err error) {
	if s.err == nil {
		s.err = err
	}
}

func hostStateGet(key, buf []byte) int32 {
	v, ok := sim.state[string(key)]
	if !ok {
		return -1
	}
	copy(buf, v)
	return int32(len(v))
}

func hostStatePut(key, value []byte, _ int32) int32 {
	if sim.state == nil {
		sim.state = map[string][]byte{}
	}
	sim.state[string(key)] = append([]byte(nil), value...)
	return 0
}

func hostStateDelete(key []byte) int32 {
	delete(sim.state, string(key))
	return 0
}

// ResetState (outside wasip1 only) empties the simulated plugin state, which
// Run keeps from call to call as the router keeps it from event to event.
func ResetState() { sim.state = nil }

func hostInputRead(b []byte) int32 {
	copy(b, sim.input)
	return int32(len(sim.input))
}

// hostEmit takes an output as the router does: after a refusal every
// emit of the call is -1; one over DefaultMaxOutputs is -2; one whose
// envelope is over DefaultMaxOutputBytes -3; a malformed or refused one -1
// (CheckOutput says why, and Run returns it).
func hostEmit(b []byte) int32 {
	if sim.err != nil {
		return -1 // the call already failed: the router keeps it failed
	}
	if len(sim.outputs) >= DefaultMaxOutputs {
		sim.refuse(fmt.Errorf("output %d refused: over limits.max_outputs (%d by default)", len(sim.outputs)+1, DefaultMaxOutputs))
		return -2
	}
	if len(b) > DefaultMaxOutputBytes {
		sim.refuse(fmt.Errorf("output %d refused: over limits.max_output_bytes (1 MiB by default): its envelope is %d bytes", len(sim.outputs)+1, len(b)))
		return -3
	}
	o, err := decodeOutput(b)
	if err == nil {
		err = CheckOutput(o)
	}
	if err != nil {
		sim.refuse(fmt.Errorf("output %d refused: %w", len(sim.outputs)+1, err))
		return -1
	}
	sim.outputs = append(sim.outputs, o)
	return 0
}

func hostFail(reason string) { sim.reason = reason }

func hostLog(level int32, msg string) {
	sim.logs = append(sim.logs, LogLine{Level: Level(level), Msg: msg})
}

// LogLine is a line the plugin logged during Run.
type LogLine struct {
	Level Level
	Msg   string
}

// Result is what Run observed.
type Result struct {
	Verdict Verdict
	Reason  string   // the text passed to Retry/Reject (or by a failed init)
	Outputs []Output // the outputs emitted, decoded from their envelopes
	Logs    []LogLine
}

// Run (outside wasip1 only) does what the router does with one fresh plugin
// instance: it passes config to the registered Init function through a config
// envelope, then ev to the handler through an event envelope, and returns the
// verdict, the reason and the emitted outputs decoded from their envelopes.
// A failed init returns an error. It is meant for plugins' unit tests.
func Run(config map[string]string, ev Event) (Result, error) {
	sim.outputs, sim.reason, sim.logs, sim.err = nil, "", nil, nil
	sim.input = appendConfig(nil, config)
	if rc := callInit(int32(len(sim.input))); rc != 0 {
		return Result{Reason: sim.reason, Logs: sim.logs}, &InitError{Reason: sim.reason}
	}
	sim.input = appendEvent(nil, &ev)
	if handler == nil {
		return Result{}, ErrNoHandler
	}
	v := Verdict(callHandle(int32(len(sim.input))))
	res := Result{Verdict: v, Reason: sim.reason, Outputs: sim.outputs, Logs: sim.logs}
	return res, sim.err
}

// InitError is returned by Run when the plugin's init fails.
type InitError struct{ Reason string }

func (e *InitError) Error() string { return "sy_init failed: " + e.Reason }
