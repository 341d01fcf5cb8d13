package etcd

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"go.uber.org/zap"
)

// TestSlogLogger: the etcd client's zap entries reach the slog logger with
// their level and fields; debug entries only when slog enables them.
func TestSlogLogger(t *testing.T) {
	var buf bytes.Buffer
	l := slogLogger(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo})))
	l.With(zap.String("endpoint", "127.0.0.1:2379")).Warn("retrying of unary invoker failed", zap.Error(errors.New("connection refused")))
	l.Debug("noise")
	out := buf.String()
	for _, want := range []string{"level=WARN", "retrying of unary invoker failed", "endpoint=127.0.0.1:2379", "connection refused"} {
		if !strings.Contains(out, want) {
			t.Errorf("the slog output %q lacks %q", out, want)
		}
	}
	if strings.Contains(out, "noise") {
		t.Errorf("a debug entry reached a logger at level INFO: %q", out)
	}
	if slogLogger(nil) == nil {
		t.Error("slogLogger(nil) must return a logger that discards")
	}
}
