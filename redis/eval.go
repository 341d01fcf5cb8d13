package redis

import (
	"context"
	"slices"

	goredis "github.com/redis/go-redis/v9"
)

// A script call through Script.Run boxes its name, its digest and each
// key into a new argument list, every time. The hot scripts (acquire.lua,
// release.lua and the multi-key ones) are sent instead as commands built
// from arguments boxed once: the digest and source once per Locker, a
// lock's names once per acquisition (lockNames). go-redis sees the same
// command (EVALSHA, its key position set), through its Process, so hooks,
// retries and Cluster routing are as for Script.Run. Only a go-redis
// *Client or *ClusterClient, and an owned client (Open), whose Process
// sends a call to a slot it may cut, are called so: a wrapper may count on
// Scripter.

// processor is the part of a go-redis client that runs a command built by
// the caller.
type processor interface {
	Process(ctx context.Context, cmd goredis.Cmder) error
}

// scriptArgs are the EVALSHA and EVAL arguments of a script, boxed once.
type scriptArgs struct{ sha, src any }

// newScript returns the script of src, registered for runScript's direct
// path.
func (d *redisDriver) newScript(src string) *goredis.Script {
	s := goredis.NewScript(src)
	if d.direct == nil {
		d.direct = make(map[*goredis.Script]scriptArgs)
	}
	d.direct[s] = scriptArgs{sha: s.Hash(), src: src}
	return s
}

// runScript runs script with keys and args: EVALSHA, then EVAL when the
// server lacks the script, as Script.Run does. boxed, when not nil, holds
// keys boxed (the same strings, in order): with them, and a client that
// allows it, the call allocates one argument list instead of a box for
// each key.
func (d *redisDriver) runScript(ctx context.Context, script *goredis.Script, keys []string, boxed []any, args ...any) (any, error) {
	sa, ok := d.direct[script]
	if !ok || d.proc == nil || boxed == nil || len(boxed) != len(keys) {
		// A copy, so that args does not escape: the direct path below
		// only copies it, and its callers' argument lists stay on their
		// stacks.
		return script.Run(ctx, d.client, keys, slices.Clone(args)...).Result()
	}
	c := &scriptCmd{}
	argv := c.args(3 + len(boxed) + len(args))
	argv[0], argv[1], argv[2] = "evalsha", sa.sha, len(boxed)
	copy(argv[3+copy(argv[3:], boxed):], args)
	cmd := d.process(ctx, c, argv, len(boxed) > 0)
	if isNoScript(cmd.Err()) {
		// The server's cache lost the script: EVAL, with a command and
		// a list of its own (a hook may keep the first command).
		argv = slices.Clone(argv)
		argv[0], argv[1] = "eval", sa.src
		cmd = d.process(ctx, &scriptCmd{}, argv, len(boxed) > 0)
	}
	return cmd.Result()
}

// scriptCmdArgs is how long an argument list scriptCmd holds: those of
// acquire.lua and release.lua fit, with a tombstone.
const scriptCmdArgs = 20

// scriptCmd is the command of one script call, and its argument list when
// it fits: one allocation instead of two.
type scriptCmd struct {
	cmd  goredis.Cmd
	argv [scriptCmdArgs]any
}

// args returns an argument list of n entries: c's own when it fits.
func (c *scriptCmd) args(n int) []any {
	if n <= len(c.argv) {
		return c.argv[:n]
	}
	return make([]any, n)
}

// process sends the command argv through d.proc, as c's command; keyed
// says that its keys start at argv[3], as EVAL's do.
func (d *redisDriver) process(ctx context.Context, c *scriptCmd, argv []any, keyed bool) *goredis.Cmd {
	// NewCmd's own command stays on the stack: c holds the copy.
	c.cmd = *goredis.NewCmd(ctx, argv...)
	if keyed {
		c.cmd.SetFirstKeyPos(3)
	}
	_ = d.proc.Process(ctx, &c.cmd)
	return &c.cmd
}
