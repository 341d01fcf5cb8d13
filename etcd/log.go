package etcd

import (
	"context"
	"log/slog"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// slogLogger returns a *zap.Logger that writes to l, for clientv3.Config's
// Logger: the etcd client of a URL-opened Locker then logs where the Locker
// does instead of printing its own lines to stderr. Debug entries are
// dropped unless l enables them.
func slogLogger(l *slog.Logger) *zap.Logger {
	if l == nil {
		return zap.NewNop()
	}
	return zap.New(&slogCore{l: l})
}

// slogCore is a zapcore.Core over a *slog.Logger.
type slogCore struct {
	l     *slog.Logger
	attrs []any // from With
}

func slogLevel(l zapcore.Level) slog.Level {
	switch {
	case l >= zapcore.ErrorLevel:
		return slog.LevelError
	case l == zapcore.WarnLevel:
		return slog.LevelWarn
	case l == zapcore.InfoLevel:
		return slog.LevelInfo
	}
	return slog.LevelDebug
}

func (c *slogCore) Enabled(l zapcore.Level) bool {
	return c.l.Enabled(context.Background(), slogLevel(l))
}

func (c *slogCore) With(fields []zapcore.Field) zapcore.Core {
	return &slogCore{l: c.l, attrs: append(append([]any(nil), c.attrs...), attrsOf(fields)...)}
}

func (c *slogCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if c.Enabled(e.Level) {
		return ce.AddCore(e, c)
	}
	return ce
}

func (c *slogCore) Write(e zapcore.Entry, fields []zapcore.Field) error {
	args := append(append([]any{"logger", "etcd-client"}, c.attrs...), attrsOf(fields)...)
	c.l.Log(context.Background(), slogLevel(e.Level), e.Message, args...)
	return nil
}

func (c *slogCore) Sync() error { return nil }

// attrsOf turns zap fields into slog key-value pairs.
func attrsOf(fields []zapcore.Field) []any {
	if len(fields) == 0 {
		return nil
	}
	enc := zapcore.NewMapObjectEncoder()
	for _, f := range fields {
		f.AddTo(enc)
	}
	out := make([]any, 0, 2*len(enc.Fields))
	for k, v := range enc.Fields {
		out = append(out, k, v)
	}
	return out
}
