package redis

import (
	"errors"
	"net"
	"strings"

	goredis "github.com/redis/go-redis/v9"

	"github.com/golocker/locker/driver"
)

// classify marks the Redis errors no retry can cure: a closed client,
// authentication and ACL refusals, and commands the server does not know or
// allow.
func classify(err error) error {
	if errors.Is(err, goredis.ErrClosed) {
		return driver.Permanent(err)
	}
	if hasPrefix(err, "NOAUTH", "WRONGPASS") || refused(err) {
		return driver.Permanent(err)
	}
	return err
}

// refused reports whether err is the server refusing a command: not
// allowed by ACL, or unknown (renamed away).
func refused(err error) bool {
	return hasPrefix(err, "NOPERM", "ERR unknown command", "ERR unknown subcommand")
}

// hasPrefix reports whether err is a reply from Redis that starts with one
// of prefixes.
func hasPrefix(err error, prefixes ...string) bool {
	var rerr goredis.Error
	if !errors.As(err, &rerr) {
		return false
	}
	msg := rerr.Error()
	for _, p := range prefixes {
		if strings.HasPrefix(msg, p) {
			return true
		}
	}
	return false
}

// maybeExecuted reports whether a failed call may nevertheless have run on the
// server. It is false for a reply from Redis (an error reply is a definite
// answer), for a closed client and for errors raised before the command could
// be written (dial failures, an exhausted connection pool); true otherwise:
// a connection that broke or timed out after the command was written, or a
// ctx that ended while the reply was awaited.
func maybeExecuted(err error) bool {
	var rerr goredis.Error
	var op *net.OpError
	switch {
	case errors.As(err, &rerr),
		errors.Is(err, goredis.ErrClosed),
		errors.Is(err, goredis.ErrPoolTimeout),
		errors.Is(err, goredis.ErrPoolExhausted),
		errors.As(err, &op) && op.Op == "dial":
		return false
	}
	return true
}

// blame gives the commands of a pipeline that go-redis left without a reply
// or an error the pipeline's error: go-redis sets none on the commands of a
// pipeline whose connection failed to initialise (a refused AUTH after a
// password rotation: WRONGPASS), and Int64 would blame a reply of type
// <nil>. The pipeline's error says why.
func blame(cmds []*goredis.Cmd, execErr error) {
	if execErr == nil {
		return
	}
	for _, c := range cmds {
		if c.Err() == nil && c.Val() == nil {
			c.SetErr(execErr)
		}
	}
}

func isNoScript(err error) bool {
	return err != nil && (errors.Is(err, goredis.ErrNoScript) || goredis.HasErrorPrefix(err, "NOSCRIPT"))
}
