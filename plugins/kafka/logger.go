package kafka

import (
	"time"

	"github.com/hashicorp/go-hclog"
	kgo "github.com/twmb/franz-go/pkg/kgo"

	"github.com/switchyard-router/switchyard/internal/logthrottle"
)

// kgoLogger adapts an hclog.Logger to franz-go's kgo.Logger. franz-go asks
// Level() before building a message, so a quiet hclog costs nothing.
//
// Below debug, franz-go's info and warning lines are throttled: at most one
// per message and kgoLogEvery, the next one saying how many it held back.
// A cluster that cannot be reached made franz-go warn at every dial, 77 of
// 84 lines in 25 s (a new-user trial), while connState already logs each
// new connection error once.
type kgoLogger struct {
	l        hclog.Logger
	throttle *logthrottle.Throttle
}

// kgoLogEvery is how often one franz-go line of a kind is let through.
const kgoLogEvery = time.Minute

func newKgoLogger(l hclog.Logger) kgoLogger {
	return kgoLogger{l: l, throttle: &logthrottle.Throttle{Every: kgoLogEvery}}
}

var _ kgo.Logger = kgoLogger{}

func (k kgoLogger) Level() kgo.LogLevel {
	switch k.l.GetLevel() {
	case hclog.Off:
		return kgo.LogLevelNone
	case hclog.Error:
		return kgo.LogLevelError
	case hclog.Warn:
		return kgo.LogLevelWarn
	case hclog.Trace, hclog.Debug:
		return kgo.LogLevelDebug
	default: // Info, NoLevel
		return kgo.LogLevelInfo
	}
}

func (k kgoLogger) Log(level kgo.LogLevel, msg string, keyvals ...any) {
	switch level {
	case kgo.LogLevelError:
		k.l.Error(msg, keyvals...)
	case kgo.LogLevelWarn:
		if keyvals, ok := k.pass(level, msg, keyvals); ok {
			k.l.Warn(msg, keyvals...)
		}
	case kgo.LogLevelInfo:
		if keyvals, ok := k.pass(level, msg, keyvals); ok {
			k.l.Info(msg, keyvals...)
		}
	case kgo.LogLevelDebug:
		k.l.Debug(msg, keyvals...)
	}
}

// pass says whether a line may be logged now (always at debug), adding how
// many like it were held back since the last one.
func (k kgoLogger) pass(level kgo.LogLevel, msg string, keyvals []any) ([]any, bool) {
	if k.l.IsDebug() {
		return keyvals, true
	}
	n, ok := k.throttle.Take(level.String()+" "+msg, time.Now())
	if ok && n > 0 {
		keyvals = append(keyvals, "like_it_since_last", n)
	}
	return keyvals, ok
}
