package kafka

import (
	"github.com/hashicorp/go-hclog"
	kgo "github.com/twmb/franz-go/pkg/kgo"
)

// kgoLogger adapts an hclog.Logger to franz-go's kgo.Logger. franz-go asks
// Level() before building a message, so a quiet hclog costs nothing.
type kgoLogger struct{ l hclog.Logger }

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
		k.l.Warn(msg, keyvals...)
	case kgo.LogLevelInfo:
		k.l.Info(msg, keyvals...)
	case kgo.LogLevelDebug:
		k.l.Debug(msg, keyvals...)
	}
}
