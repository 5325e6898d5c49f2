package wasm

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/experimental"
	"github.com/tetratelabs/wazero/sys"

	"github.com/switchyard-router/switchyard"
)

// What emit returns to the guest.
const (
	EmitOK        = 0
	EmitMalformed = -1 // the envelope does not decode, or emit was called outside sy_handle
	EmitTooMany   = -2 // over limits.max_outputs
	EmitTooLarge  = -3 // the envelope is over limits.max_output_bytes
	EmitBadRange  = -4 // ptr/len point outside the guest's memory
)

const (
	// maxText bounds what one guest call may write to the router's log:
	// log() messages, stdout and stderr together. The rest is dropped and
	// one warning says how much.
	maxText = 4 << 10
	// maxReason bounds a fail() reason.
	maxReason = 4 << 10
)

type phase uint8

const (
	phaseIdle phase = iota
	phaseInit
	phaseHandle
)

// instance is one instantiated module. One goroutine at a time uses it:
// the pool hands it out and takes it back.
type instance struct {
	p      *Plugin
	mod    api.Module
	handle api.Function
	mem    *linearMemory
	stack  [1]uint64
	cctx   callCtx
	timer  *time.Timer

	// State of the current guest call, read and written by the host
	// functions (which run on the caller's goroutine).
	phase     phase
	input     []byte // what input_read copies: the event or config envelope
	buf       []byte // the event envelope, reused from event to event
	ev        *switchyard.Event
	outs      []output
	state     switchyard.StateView // the event's plugin state; nil outside sy_handle
	stateErr  error                // a state call the store failed, for the reason
	reason    string               // from fail()
	violation string               // the first broken rule (emit, input_read, ...): the event is rejected
	panicLine string               // the first "panic: " or "fatal error: " line on stderr this call (a Go plugin's panic or fatal error)

	stdout, stderr streamWriter
	textLeft       int // bytes of log text this call may still write
	textDropped    int

	// wake ends a sleep of the current call (sleep): the done channel of
	// its context, closed when its time runs out.
	wake <-chan struct{}
}

// instanceKey finds the calling instance in a host function's context.
type instanceKey struct{}

func instanceOf(ctx context.Context) *instance {
	in, _ := ctx.Value(instanceKey{}).(*instance)
	return in
}

// callCtx is the context of every sy_handle call of one instance, reused
// from call to call so that the hot path allocates no context and no timer.
// Done closes when the call's time runs out (fire): the call then ends with
// sys.ExitError (WithCloseOnContextDone) and the instance is discarded, so
// the closed channel is never needed again. It carries no values of the
// caller's context: a plugin call sees only its instance.
//
// A call's time is limits.timeout (or less, to the caller's deadline) of
// the plugin's own work: the router's copying of what the plugin emits is
// lent to the call (beginCopy, endCopy), and a timer that fires with time
// lent gives that much more, up to the caller's deadline
// (plugins/wasm/RATIONALE.md, "Why timeouts are wall-clock").
type callCtx struct {
	inst *instance
	done chan struct{}

	mu           sync.Mutex
	armed, fired bool
	gen          uint64        // the timer's generation: a stale timer's fire is ignored
	until        time.Time     // the caller's deadline; zero: none
	lent         time.Duration // copying not yet added to the call's time
	lentAll      time.Duration // all this call's copying, for the timeout's reason
	copyFrom     time.Time     // a copy under way since; zero: none
	due          bool          // the time ran out during that copy: its end says what next
}

func (c *callCtx) Deadline() (time.Time, bool) { return time.Time{}, false }
func (c *callCtx) Done() <-chan struct{}       { return c.done }

func (c *callCtx) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.fired {
		return context.DeadlineExceeded
	}
	return nil
}

func (c *callCtx) Value(key any) any {
	if _, ok := key.(instanceKey); ok {
		return c.inst
	}
	return nil
}

// fire is the function of the timer of generation gen, and of each
// extension it makes: the call's time has run out, unless a copy is under
// way (its end decides) or time was lent.
func (c *callCtx) fire(gen uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.armed || c.fired || gen != c.gen {
		return
	}
	if !c.copyFrom.IsZero() {
		c.due = true
		return
	}
	c.extendOrEnd()
}

// extendOrEnd gives the call the time lent since the last fire, up to the
// caller's deadline, or ends it. An extension is a timer of the call's
// generation: a call that one reached is given a new generation after it
// (newTimer), so a late extension ends no later call.
func (c *callCtx) extendOrEnd() {
	d := c.lent
	c.lent = 0
	if !c.until.IsZero() {
		d = min(d, time.Until(c.until))
	}
	if d > 0 {
		gen := c.gen
		time.AfterFunc(d, func() { c.fire(gen) })
		return
	}
	c.fired = true
	close(c.done)
}

// arm begins a call whose caller's deadline is until (zero: none).
func (c *callCtx) arm(until time.Time) {
	c.mu.Lock()
	c.armed, c.until, c.lent, c.lentAll, c.copyFrom, c.due = true, until, 0, 0, time.Time{}, false
	c.mu.Unlock()
}

// beginCopy and endCopy bracket the host's copying of an output: its time
// is lent to the call.
func (c *callCtx) beginCopy() {
	c.mu.Lock()
	c.copyFrom = time.Now()
	c.mu.Unlock()
}

func (c *callCtx) endCopy() {
	c.mu.Lock()
	defer c.mu.Unlock()
	d := time.Since(c.copyFrom)
	c.copyFrom = time.Time{}
	c.lent += d
	c.lentAll += d
	if c.due {
		c.due = false
		c.extendOrEnd()
	}
}

// disarm ends a call and reports whether its time ran out, and how much
// copying was lent to it.
func (c *callCtx) disarm() (fired bool, lent time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.armed = false
	return c.fired, c.lentAll
}

var _ context.Context = (*callCtx)(nil)

// newInstance instantiates the module and runs _initialize,
// sy_abi_version and sy_init on it.
func (p *Plugin) newInstance(ctx context.Context) (_ *instance, err error) {
	in := &instance{p: p, mem: &linearMemory{limit: uint64(p.limits.Memory) - p.tables, tables: p.tables, total: &p.memory}}
	in.cctx = callCtx{inst: in, done: make(chan struct{})}
	in.stdout = streamWriter{in: in, stream: "stdout", level: hclog.Info}
	in.stderr = streamWriter{in: in, stream: "stderr", level: hclog.Warn}
	in.phase, in.input, in.textLeft = phaseInit, p.configEnv, maxText

	ictx := experimental.WithMemoryAllocator(ctx, in.mem)
	ictx = context.WithValue(ictx, instanceKey{}, in)
	ictx, cancel := context.WithTimeout(ictx, p.initTimeout)
	defer cancel()
	defer func() {
		in.flushText()
		in.phase, in.input = phaseIdle, nil
		if err != nil && in.mod != nil {
			in.mod.Close(context.Background())
		}
	}()

	in.mod, err = p.rt.r.InstantiateModule(ictx, p.compiled, in.moduleConfig())
	if err != nil {
		_, reason := in.failure("instantiating", err, false, p.initTimeout)
		return nil, errors.New(reason)
	}
	if err := in.start(ictx); err != nil {
		return nil, err
	}
	in.handle = in.mod.ExportedFunction("sy_handle")
	in.wake = in.cctx.done
	in.newTimer()
	return in, nil
}

// moduleConfig is an instance's wazero configuration: anonymous (so a
// plugin can have any number of instances), no start functions (newInstance
// calls them), its output into the router's log, real clocks, sleeps the
// call's time bounds (sleep) and crypto/rand.
func (in *instance) moduleConfig() wazero.ModuleConfig {
	return wazero.NewModuleConfig().
		WithName("").
		WithStartFunctions().
		WithStdout(&in.stdout).
		WithStderr(&in.stderr).
		WithSysWalltime().
		WithSysNanotime().
		WithNanosleep(in.sleep).
		WithRandSource(rand.Reader)
}

// sleep is WASI's sleep (a poll_oneoff on a clock: Rust's thread::sleep,
// Go's scheduler with nothing to run, C's nanosleep): it waits ns, or
// until the call's time runs out (sy_handle's, or init's), and then the
// call ends as timed out. wazero's own sleep (time.Sleep) would outlive
// the timeout, and none (its default, once ours) turned a plugin's wait
// into a spin or no wait at all (plugins/wasm/RATIONALE.md, "Sleep").
func (in *instance) sleep(ns int64) {
	if ns == math.MaxInt64 {
		// wazero's sleep for a poll with no clock whose subscriptions
		// (an fd_write, a bad fd) it answered at once: nothing to wait for.
		return
	}
	t := time.NewTimer(time.Duration(ns))
	defer t.Stop()
	select {
	case <-t.C:
	case <-in.wake:
	}
}

// start runs the instantiated module's _initialize (if exported), checks
// sy_abi_version and runs sy_init (if exported) with the plugin's config.
func (in *instance) start(ctx context.Context) error {
	p := in.p
	in.wake = ctx.Done()
	call := func(name string, params ...uint64) (uint64, error) {
		in.mem.enter()
		res, err := in.mod.ExportedFunction(name).Call(ctx, params...)
		in.mem.exit()
		// A call whose time ran out may still return normally (back from
		// a sleep its bound ended): it failed all the same, as in run.
		timedOut := errors.Is(ctx.Err(), context.DeadlineExceeded)
		if f, reason := in.failure(name, err, timedOut, p.initTimeout); f != "" {
			return 0, errors.New(reason)
		}
		if len(res) == 0 {
			return 0, nil
		}
		return res[0], nil
	}
	if p.hasInitialize {
		if _, err := call("_initialize"); err != nil {
			return err
		}
	}
	v, err := call("sy_abi_version")
	if err != nil {
		return err
	}
	if v := api.DecodeI32(v); v != ABIVersion {
		return fmt.Errorf("sy_abi_version() returned %d: this router speaks plugin ABI version %d", v, ABIVersion)
	}
	if !p.hasInit {
		return nil
	}
	rc, err := call("sy_init", uint64(len(p.configEnv)))
	if err != nil {
		return err
	}
	if rc := api.DecodeI32(rc); rc != 0 {
		reason := in.reason
		if reason == "" {
			reason = "no reason given"
		}
		return &InitError{Code: rc, Reason: reason}
	}
	return nil
}

// InitError is a plugin's sy_init refusing to start (a return other than
// 0), most often for its config: a key it needs is missing or wrong.
type InitError struct {
	Code   int32
	Reason string // what the plugin said (sy_reason), or "no reason given"
}

func (e *InitError) Error() string { return fmt.Sprintf("sy_init returned %d: %s", e.Code, e.Reason) }

// newTimer gives the instance a stopped timer of a new generation. A
// timer whose Stop came too late (its function already started) is
// replaced: its function may still be waiting for the lock, and must not
// end the next call.
func (in *instance) newTimer() {
	c := &in.cctx
	c.mu.Lock()
	c.gen++
	gen := c.gen
	c.mu.Unlock()
	in.timer = time.AfterFunc(time.Hour, func() { c.fire(gen) })
	in.timer.Stop()
}

// close releases the instance.
func (in *instance) close() {
	if in.timer != nil {
		in.timer.Stop()
	}
	in.mod.Close(context.Background())
}

// failure says why a guest call failed, or "" if it did not: the memory
// limit, the timeout, a broken rule of the ABI, or a trap or exit, in that
// order. Any of them discards the instance. A trap after the guest called
// fail() (an AssemblyScript abort, a Rust panic through the SDK's hook)
// keeps what it said.
func (in *instance) failure(call string, err error, fired bool, timeout time.Duration) (Failure, string) {
	lim := in.p.limits
	switch {
	case in.mem.refused > 0:
		return FailureMemory, fmt.Sprintf("memory limit reached: the plugin tried to grow its memory to %s, over limits.memory = %s",
			in.p.withTables(in.mem.refused), formatBytes(uint64(lim.Memory)))
	case fired:
		return FailureTimeout, fmt.Sprintf("timed out: %s ran longer than %s", call, timeout)
	case in.violation != "":
		return FailureBrokenRule, in.violation
	case err != nil:
		f, reason := FailureTrap, exitReason(call, err, timeout)
		if strings.HasPrefix(reason, "timed out") {
			f = FailureTimeout
		}
		if in.reason != "" {
			reason += "; before it, the plugin said: " + in.reason
		}
		if in.panicLine != "" {
			reason += "; it printed: " + in.panicLine
		}
		return f, reason
	}
	return "", ""
}

// exitReason describes a trap, or a proc_exit, as one line.
func exitReason(call string, err error, timeout time.Duration) string {
	var exit *sys.ExitError
	if !errors.As(err, &exit) {
		return describeTrap(call, err)
	}
	switch exit.ExitCode() {
	case sys.ExitCodeDeadlineExceeded:
		return fmt.Sprintf("timed out: %s ran longer than %s", call, timeout)
	case sys.ExitCodeContextCanceled:
		return fmt.Sprintf("%s was cancelled", call)
	case 0:
		return fmt.Sprintf("%s exited: proc_exit(0), or the runtime is closing", call)
	}
	return fmt.Sprintf("%s exited with code %d (proc_exit)", call, exit.ExitCode())
}

// describeTrap turns a wazero trap ("wasm error: unreachable\nwasm stack
// trace:\n\t.f()\n\t.sy_handle(i32) i32") into one line: up to four
// frames of the plugin's own code, Rust names demangled and the language
// runtime's panic machinery left out.
func describeTrap(call string, err error) string {
	lines := strings.Split(strings.TrimSpace(err.Error()), "\n")
	msg := strings.TrimPrefix(lines[0], "wasm error: ")
	var frames []string
	for _, l := range lines[1:] {
		l = strings.TrimSpace(l)
		if !strings.HasPrefix(l, ".") && (!strings.Contains(l, "(") || strings.HasPrefix(l, "0x")) {
			continue
		}
		f := switchyard.Truncate(demangle(l), maxFrame)
		if runtimeFrame(f) {
			continue
		}
		if len(frames) == 4 {
			frames = append(frames, "…")
			break
		}
		frames = append(frames, f)
	}
	s := fmt.Sprintf("%s trapped: %s", call, msg)
	if len(frames) > 0 {
		s += " (at " + strings.Join(frames, " ← ") + ")"
	}
	return switchyard.Truncate(s, maxReason)
}

// maxFrame bounds one frame of a trap's reason: a function's name comes
// from the module's name section, which the plugin's author chose (a
// plugin trial's 2 MB name grew the data file by 78 MB in five events, a
// reason kept with each attempt, and the log, GET /v1/plugins and the DLQ
// with it).
const maxFrame = 256

// demangle turns a frame of a Rust (legacy-mangled) function,
// "._ZN6panics12parse_amount17h0123456789abcdefE(i32) i32", into
// "panics::parse_amount"; other frames are returned without the dot and the
// signature.
func demangle(frame string) string {
	name := strings.TrimPrefix(frame, ".")
	if i := strings.IndexByte(name, '('); i >= 0 {
		name = name[:i]
	}
	rest, ok := strings.CutPrefix(name, "_ZN")
	if !ok {
		return name
	}
	var parts []string
	for len(rest) > 0 && rest[0] != 'E' {
		n := 0
		for len(rest) > 0 && rest[0] >= '0' && rest[0] <= '9' {
			n = n*10 + int(rest[0]-'0')
			rest = rest[1:]
		}
		if n == 0 || n > len(rest) {
			return name
		}
		parts = append(parts, rest[:n])
		rest = rest[n:]
	}
	if k := len(parts) - 1; k > 0 && len(parts[k]) == 17 && parts[k][0] == 'h' { // the hash
		parts = parts[:k]
	}
	return strings.Join(parts, "::")
}

// runtimeFrame is a frame of a language runtime's panic or abort path,
// which says nothing about where the plugin failed: Rust's, AssemblyScript's
// and Go's (runtime.gopanic, runtime.mapassign_faststr: before, a Go
// plugin's four frames were all the runtime's, a plugin author's trial).
func runtimeFrame(f string) bool {
	for _, p := range []string{"std::", "core::", "alloc::", "rust_panic", "__rust", "rust_begin_unwind", "~lib/", "runtime.", "internal/runtime/"} {
		if strings.HasPrefix(f, p) {
			return true
		}
	}
	return false
}

// run calls sy_handle on ev. keep is false when the instance must be
// discarded.
func (in *instance) run(ctx context.Context, ev *switchyard.Event) (outs []switchyard.PluginOutput, keep bool, err error) {
	p := in.p
	timeout := p.limits.Timeout
	until, ok := ctx.Deadline()
	if ok {
		timeout = min(timeout, time.Until(until))
	}
	if err := ctx.Err(); err != nil || timeout <= 0 {
		if err == nil {
			err = context.DeadlineExceeded
		}
		return nil, true, p.retry(ev.ID, "not run: "+err.Error(), err)
	}

	in.buf = appendEvent(in.buf[:0], ev)
	in.phase, in.input, in.ev = phaseHandle, in.buf, ev
	in.state, in.stateErr = switchyard.StateFrom(ctx), nil
	in.reason, in.violation, in.panicLine = "", "", ""
	in.textLeft, in.textDropped = maxText, 0
	in.stack[0] = uint64(len(in.buf))

	in.cctx.arm(until)
	in.timer.Reset(timeout)
	in.mem.enter()
	callErr := in.handle.CallWithStack(&in.cctx, in.stack[:])
	in.mem.exit()
	stopped := in.timer.Stop()
	fired, lent := in.cctx.disarm()
	if !stopped && !fired {
		in.newTimer() // it expired, or was extended, as the call returned: make it stale
	}

	in.flushText()
	in.phase, in.input, in.ev, in.state = phaseIdle, nil, nil, nil
	defer func() {
		clear(in.outs) // drop the references to this event's outputs
		in.outs = in.outs[:0]
	}()

	if f, reason := in.failure("sy_handle", callErr, fired, timeout); f != "" {
		if f == FailureTimeout && lent >= time.Millisecond {
			reason += fmt.Sprintf(" (and %v the router took copying its outputs)", lent.Round(time.Millisecond))
		}
		return nil, false, p.failed(ev.ID, f, reason, callErr)
	}
	return in.verdict(ev, api.DecodeI32(in.stack[0]))
}

// verdict turns what sy_handle returned into the outputs (ok), a retry or
// a reject; an answer that is no verdict is a broken rule.
func (in *instance) verdict(ev *switchyard.Event, v int32) ([]switchyard.PluginOutput, bool, error) {
	p := in.p
	switch v := api.DecodeI32(in.stack[0]); v {
	case 0:
		return p.outputs(ev, in.outs), true, nil
	case 1:
		reason := in.reason
		if reason == "" {
			reason = "the plugin asked for a retry (no reason given)"
		}
		if in.stateErr != nil {
			reason += " (after " + in.stateErr.Error() + ")"
		}
		return nil, true, p.retry(ev.ID, reason, in.stateErr)
	case 2:
		reason := in.reason
		if reason == "" {
			reason = "the plugin rejected the event (no reason given)"
		}
		return nil, true, switchyard.Permanent(&Error{Plugin: p.name, EventID: ev.ID, Verdict: VerdictReject, Reason: reason})
	default:
		return nil, false, p.failed(ev.ID, FailureBrokenRule, fmt.Sprintf("sy_handle returned %d: the verdicts are 0 ok, 1 retry, 2 reject", v), nil)
	}
}

// broke records the first broken rule of the current call.
func (in *instance) broke(format string, args ...any) {
	if in.violation == "" {
		in.violation = fmt.Sprintf(format, args...)
	}
}

// Host functions. They run on the goroutine of the guest call, which owns
// the instance.

func hostInputRead(ctx context.Context, mod api.Module, stack []uint64) {
	in := instanceOf(ctx)
	ptr, n := api.DecodeU32(stack[0]), api.DecodeU32(stack[1])
	if in == nil || in.phase == phaseIdle {
		stack[0] = api.EncodeI32(-1)
		return
	}
	src := in.input
	if uint64(n) < uint64(len(src)) {
		src = src[:n]
	}
	if !mod.Memory().Write(ptr, src) {
		in.broke("input_read(%d, %d) points outside the plugin's memory (%d bytes)", ptr, n, mod.Memory().Size())
		stack[0] = api.EncodeI32(-1)
		return
	}
	stack[0] = api.EncodeI32(int32(len(in.input)))
}

func hostEmit(ctx context.Context, mod api.Module, stack []uint64) {
	in := instanceOf(ctx)
	ptr, n := api.DecodeU32(stack[0]), api.DecodeU32(stack[1])
	if in == nil {
		stack[0] = api.EncodeI32(EmitMalformed)
		return
	}
	stack[0] = api.EncodeI32(in.emit(mod, ptr, n))
}

func (in *instance) emit(mod api.Module, ptr, n uint32) int32 {
	lim := in.p.limits
	i := len(in.outs) + 1
	switch {
	case in.phase != phaseHandle:
		in.broke("emit called outside sy_handle")
		return EmitMalformed
	case in.violation != "":
		return EmitMalformed // the call already failed; keep it failed
	case len(in.outs) >= lim.MaxOutputs:
		in.broke("too many outputs: output %d is over limits.max_outputs = %d", i, lim.MaxOutputs)
		return EmitTooMany
	case int64(n) > lim.MaxOutputBytes:
		in.broke("output %d is too large: %s, over limits.max_output_bytes = %s", i, formatBytes(uint64(n)), formatBytes(uint64(lim.MaxOutputBytes)))
		return EmitTooLarge
	}
	view, ok := mod.Memory().Read(ptr, n)
	if !ok {
		in.broke("emit(%d, %d) points outside the plugin's memory (%d bytes)", ptr, n, mod.Memory().Size())
		return EmitBadRange
	}
	// The one copy out of guest memory: the output's strings and data
	// alias it from here on. Its time is lent to the call: 16 outputs of
	// 900 KiB took 62 ms to copy on a cold heap (page faults), 1.3–4 ms on
	// a warm one, against a default timeout of 50 ms.
	in.cctx.beginCopy()
	b := make([]byte, n)
	copy(b, view)
	if afterCopy != nil {
		afterCopy()
	}
	o, err := decodeOutput(b)
	in.cctx.endCopy()
	if err != nil {
		in.broke("output %d is malformed: %v", i, err)
		return EmitMalformed
	}
	in.outs = append(in.outs, o)
	return EmitOK
}

// afterCopy, when set (tests), runs in emit's copy: a copy that takes the
// time the test says.
var afterCopy func()

func hostFail(ctx context.Context, mod api.Module, stack []uint64) {
	in := instanceOf(ctx)
	ptr, n := api.DecodeU32(stack[0]), api.DecodeU32(stack[1])
	if in == nil {
		return
	}
	b, ok := mod.Memory().Read(ptr, min(n, maxReason))
	if !ok {
		in.broke("fail(%d, %d) points outside the plugin's memory (%d bytes)", ptr, n, mod.Memory().Size())
		return
	}
	in.reason = escapeControls(strings.ToValidUTF8(string(b), "\uFFFD"))
	if n > maxReason {
		in.reason += "…"
	}
}

func hostLog(ctx context.Context, mod api.Module, stack []uint64) {
	in := instanceOf(ctx)
	level, ptr, n := api.DecodeI32(stack[0]), api.DecodeU32(stack[1]), api.DecodeU32(stack[2])
	if in == nil {
		return
	}
	lvl := logLevel(level)
	if !enabled(in.p.log, lvl) {
		return
	}
	b, ok := mod.Memory().Read(ptr, n)
	if !ok {
		in.broke("log(%d, %d, %d) points outside the plugin's memory (%d bytes)", level, ptr, n, mod.Memory().Size())
		return
	}
	in.text(lvl, "", b)
}

// logLevel maps log()'s level: 0 trace, 1 debug, 2 info, 3 warn, 4 error.
func logLevel(l int32) hclog.Level {
	switch {
	case l <= 0:
		return hclog.Trace
	case l == 1:
		return hclog.Debug
	case l == 2:
		return hclog.Info
	case l == 3:
		return hclog.Warn
	default:
		return hclog.Error
	}
}

// text logs one line of guest text within the call's budget.
func (in *instance) text(level hclog.Level, stream string, b []byte) {
	if len(b) > in.textLeft {
		in.textDropped += len(b) - in.textLeft
		b = b[:in.textLeft]
	}
	if len(b) == 0 {
		return
	}
	in.textLeft -= len(b)
	msg := escapeControls(strings.ToValidUTF8(string(b), "\uFFFD"))
	args := make([]any, 0, 4)
	if stream != "" {
		args = append(args, "stream", stream)
	}
	if in.ev != nil {
		args = append(args, "event", in.ev.ID)
	} else if in.phase == phaseInit {
		args = append(args, "phase", "init")
	}
	in.p.log.Log(level, msg, args...)
}

// escapeControls writes the control characters of a plugin's text (but
// tab) as Go escapes: a plugin must not be able to move the cursor, clear
// the screen or end a log line in the operator's terminal or log file.
func escapeControls(s string) string {
	if !strings.ContainsFunc(s, isEscaped) {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		switch {
		case !isEscaped(r):
			b.WriteRune(r)
		case r <= 0xff:
			fmt.Fprintf(&b, `\x%02x`, r)
		default:
			fmt.Fprintf(&b, `\u%04x`, r)
		}
	}
	return b.String()
}

func isEscaped(r rune) bool {
	return r != '\t' && (r <= 0x1f || (r >= 0x7f && r <= 0x9f) || r == 0x2028 || r == 0x2029)
}

// flushText logs what is left of stdout/stderr lines and says how much the
// budget dropped.
func (in *instance) flushText() {
	in.stdout.flush()
	in.stderr.flush()
	if in.textDropped > 0 {
		args := []any{"dropped_bytes", in.textDropped, "limit_bytes", maxText}
		if in.ev != nil {
			args = append(args, "event", in.ev.ID)
		}
		in.p.log.Warn("plugin output truncated: too much log text in one call", args...)
		in.textDropped = 0
	}
}

// streamWriter is a guest's stdout or stderr: line by line into the log.
type streamWriter struct {
	in     *instance
	stream string
	level  hclog.Level
	line   []byte
}

func (w *streamWriter) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			// Keep a partial line, within the budget.
			room := max(0, min(len(p), w.in.textLeft-len(w.line)))
			w.line = append(w.line, p[:room]...)
			w.in.textDropped += len(p) - room
			break
		}
		w.line = append(w.line, p[:i]...)
		w.flush()
		p = p[i+1:]
	}
	return n, nil
}

func (w *streamWriter) flush() {
	if len(w.line) > 0 {
		line := bytes.TrimRight(w.line, "\r")
		if w.stream == "stderr" && w.in.panicLine == "" && (bytes.HasPrefix(line, []byte("panic: ")) || bytes.HasPrefix(line, []byte("fatal error: "))) {
			// The Go runtime's first line of a panic, or of a fatal error
			// (a deadlock, out of memory: a plugin trial's reason said only
			// "unreachable"): the trap's reason keeps it (failure).
			w.in.panicLine = escapeControls(strings.ToValidUTF8(string(line[:min(len(line), maxReason)]), "\uFFFD"))
		}
		if enabled(w.in.p.log, w.level) {
			w.in.text(w.level, w.stream, line)
		}
		w.line = w.line[:0]
	}
}

// formatBytes says n bytes for an error or a log line: in whole MiB or KiB
// where it is, else in MiB with as few decimals as keep it from reading as
// a whole number (a size just over a limit of 16MiB is not "16.0MiB").
func formatBytes(n uint64) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%dMiB", n>>20)
	case n >= 1<<20:
		return notWhole(float64(n)/(1<<20)) + "MiB"
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%dKiB", n>>10)
	default:
		return fmt.Sprintf("%d bytes", n)
	}
}

// notWhole is v with the fewest decimals, up to 6, that do not all read 0.
func notWhole(v float64) string {
	for d := 1; ; d++ {
		s := strconv.FormatFloat(v, 'f', d, 64)
		if d == 6 || strings.TrimRight(s[strings.IndexByte(s, '.')+1:], "0") != "" {
			return s
		}
	}
}

// enabled reports whether log writes at level l.
func enabled(log hclog.Logger, l hclog.Level) bool {
	switch l {
	case hclog.Trace:
		return log.IsTrace()
	case hclog.Debug:
		return log.IsDebug()
	case hclog.Info:
		return log.IsInfo()
	case hclog.Warn:
		return log.IsWarn()
	default:
		return log.IsError()
	}
}
