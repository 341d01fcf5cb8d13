//go:build unix

package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strconv"
	"syscall"
	"time"

	"github.com/golocker/locker"
)

// runCmd is "lockctl run".
func runCmd(args []string, stdout, stderr io.Writer) int {
	c := newCLI("run", stdout, stderr)
	try := c.fs.Bool("try", false, "give up at once (exit 75) when KEY is held")
	quiet := c.fs.Bool("quiet", false, "with --try, print nothing when KEY is held (cron mails what a job prints)")
	ttl := c.fs.Duration("ttl", 0, "the lock's TTL (default the backend's, or the URL's ttl)")
	minHold := c.fs.Duration("min-hold", 0, "keep KEY taken at least this long after it was taken, even when CMD ends or crashes earlier")
	maxHold := c.fs.Duration("max-hold", 0, "end the lock (and CMD, as on a loss) this long after it was taken")
	grace := c.fs.Duration("grace", defaultGrace, "time CMD has after SIGTERM, once the lock is lost, before SIGKILL")
	owner := c.fs.String("owner", "", "owner label shown by inspect (default host:pid)")
	permits := c.fs.Int("permits", 0, "take this many permits of the semaphore KEY, instead of the lock KEY (needs --limit; default 1)")
	limit := c.fs.Int("limit", 0, "the semaphore KEY's number of permits: at most this many are held at once, store-wide")
	data := c.fs.String("data", "", "data stored with the lock, shown by inspect and ls (at most 1 KiB)")

	i := slices.Index(args, "--")
	if i < 0 {
		i = len(args)
	}
	pos, err := c.parse(args[:i])
	if err != nil {
		return c.usageError(err)
	}
	if i == len(args) {
		return c.usageError(errors.New(`no "--" before CMD`))
	}
	command := args[i+1:]
	key, err := oneKey(pos)
	switch {
	case err != nil:
		return c.usageError(err)
	case len(command) == 0:
		return c.usageError(errors.New(`no CMD after "--"`))
	case negative(c.fs) != nil:
		return c.usageError(negative(c.fs))
	case *quiet && !*try:
		return c.usageError(errors.New("--quiet keeps a --try that finds KEY held silent: it needs --try"))
	case *ttl > 0 && c.urlHas("ttl"):
		return c.usageError(errors.New("the TTL is given twice: by --ttl and by the URL's ttl parameter"))
	case *permits != 0 && *limit == 0:
		return c.usageError(errors.New("--permits takes permits of a semaphore: give its --limit too"))
	case *limit < 0 || *permits < 0:
		return c.usageError(fmt.Errorf("--limit %d and --permits %d must not be negative", *limit, *permits))
	case *data != "" && *limit > 0:
		return c.usageError(errors.New("--data is stored with a lock: permits of a semaphore (--limit) carry none"))
	case *permits > *limit:
		return c.usageError(fmt.Errorf("--permits %d is more than --limit %d: it could never be granted", *permits, *limit))
	}
	if *limit > 0 && *permits == 0 {
		*permits = 1
	}

	var opts []locker.Option
	if *ttl > 0 {
		opts = append(opts, locker.WithTTL(*ttl))
	}
	if *owner != "" {
		opts = append(opts, locker.WithOwnerLabel(*owner))
	}
	settings, err := locker.Resolve(opts...)
	if err != nil {
		return c.usageError(err)
	}
	var lockOpts []locker.LockOption
	if *minHold > 0 {
		lockOpts = append(lockOpts, locker.MinHold(*minHold))
	}
	if *maxHold > 0 {
		lockOpts = append(lockOpts, locker.MaxHold(*maxHold))
	}
	if *data != "" {
		lockOpts = append(lockOpts, locker.WithData([]byte(*data)))
	}

	// Signals are caught from now on: one during the wait for KEY ends it.
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, signals...)
	defer signal.Stop(sigs)
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	stopWatch := make(chan struct{})
	watchDone := make(chan struct{})
	go func() {
		defer close(watchDone)
		select {
		case s := <-sigs:
			cancel(signalError{s.(syscall.Signal)})
		case <-stopWatch:
		}
	}()

	l, err := c.open(ctx, opts...)
	if err != nil {
		close(stopWatch)
		<-watchDone
		return c.acquireFailed(ctx, err)
	}
	defer l.Close()
	lk, err := acquire(ctx, l, key, *try, *limit, *permits, lockOpts)
	close(stopWatch)
	<-watchDone
	if err != nil {
		if *try && errors.Is(err, locker.ErrNotAcquired) && ctx.Err() == nil {
			if !*quiet {
				if *limit > 0 {
					fmt.Fprintf(stderr, "lockctl run: %d of the %d permits of %s are not free; %s not run\n", *permits, *limit, key, command[0])
				} else {
					fmt.Fprintf(stderr, "lockctl run: %s is held elsewhere; %s not run\n", key, command[0])
				}
			}
			return exitNotAcquired
		}
		return c.acquireFailed(ctx, err)
	}

	acquired := time.Now()
	code := c.supervise(lk, settings.OwnerLabel, command, sigs, *grace)
	if *minHold > 0 && !keptAfterExit(c.url) {
		stay(lk, acquired.Add(*minHold), sigs)
	}

	rctx, rcancel := context.WithTimeout(context.Background(), releaseTimeout)
	defer rcancel()
	if err := lk.Unlock(rctx); err != nil && !errors.Is(err, locker.ErrNotHeld) {
		fmt.Fprintf(stderr, "lockctl run: release %s: %v\n", key, locker.RedactURL(err, c.url))
	}
	return code
}

// acquire takes the lock key, or with a limit permits of the semaphore key;
// with try it does not wait.
func acquire(ctx context.Context, l locker.Locker, key string, try bool, limit, permits int, opts []locker.LockOption) (locker.Lock, error) {
	if limit == 0 {
		if try {
			return l.TryLock(ctx, key, opts...)
		}
		return l.Lock(ctx, key, opts...)
	}
	sem, err := locker.NewSemaphore(l, key, limit)
	if err != nil {
		return nil, err
	}
	if try {
		return sem.TryAcquireN(ctx, permits, opts...)
	}
	return sem.AcquireN(ctx, permits, opts...)
}

// negative returns an error naming the first duration flag set below zero.
func negative(fs *flag.FlagSet) error {
	var err error
	fs.Visit(func(f *flag.Flag) {
		if g, ok := f.Value.(flag.Getter); ok && err == nil {
			if d, ok := g.Get().(time.Duration); ok && d < 0 {
				err = fmt.Errorf("--%s %v is negative", f.Name, d)
			}
		}
	})
	return err
}

// keptAfterExit reports whether the backend of rawURL keeps a key for its
// MinHold after the Locker that held it closed. ZooKeeper does not: the
// kept node lives with the session, which Close ends.
func keptAfterExit(rawURL string) bool {
	u, err := url.Parse(rawURL)
	return err != nil || u.Scheme != "zk"
}

// stay keeps lk until the moment until, a signal, or its loss, for a
// backend that does not keep a key for its MinHold once lockctl exits.
func stay(lk locker.Lock, until time.Time, sigs <-chan os.Signal) {
	t := time.NewTimer(time.Until(until))
	defer t.Stop()
	select {
	case <-t.C:
	case <-lk.Done():
	case <-sigs:
	}
}

// signalError is the cause of the wait's ctx when a signal ended it.
type signalError struct{ sig syscall.Signal }

func (e signalError) Error() string { return "interrupted by " + e.sig.String() }

// acquireFailed reports an error of opening the store or taking the key,
// with exit code 128+N when signal N ended the wait.
func (c *cli) acquireFailed(ctx context.Context, err error) int {
	var se signalError
	if errors.As(context.Cause(ctx), &se) {
		fmt.Fprintf(c.stderr, "lockctl run: %v while waiting for the lock\n", se)
		return exitSignal + int(se.sig)
	}
	return c.fail(err)
}

// supervise runs command while lk is held and returns lockctl's exit code.
func (c *cli) supervise(lk locker.Lock, owner string, command []string, sigs <-chan os.Signal, grace time.Duration) int {
	cmd := exec.Command(command[0], command[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, c.stdout, c.stderr
	cmd.Env = append(os.Environ(),
		"LOCKER_KEY="+lk.Key(),
		"LOCKER_TOKEN="+strconv.FormatUint(lk.Token(), 10),
		"LOCKER_OWNER="+owner,
	)
	// A group of its own: signals reach CMD's children too (sh -c 'a | b'),
	// and a terminal's ^C reaches CMD once, through lockctl.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(c.stderr, "lockctl run: %v\n", err)
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) {
			return exitNotFound
		}
		return exitCannotExec
	}
	pgid := cmd.Process.Pid
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()

	var lost error
	var kill <-chan time.Time
	done := lk.Done()
	for {
		select {
		case s := <-sigs:
			_ = syscall.Kill(-pgid, s.(syscall.Signal))
		case <-done:
			done = nil
			lost = lk.Err()
			if lost == nil {
				lost = errors.New("the lock ended")
			}
			fmt.Fprintf(c.stderr, "lockctl run: lost the lock on %s (%v); sending SIGTERM to %s, SIGKILL in %v\n",
				lk.Key(), locker.RedactURL(lost, c.url), command[0], grace)
			_ = syscall.Kill(-pgid, syscall.SIGTERM)
			t := time.NewTimer(grace)
			defer t.Stop()
			kill = t.C
		case <-kill:
			kill = nil
			fmt.Fprintf(c.stderr, "lockctl run: %s still running %v after SIGTERM; sending SIGKILL\n", command[0], grace)
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
		case err := <-exited:
			if lost != nil {
				fmt.Fprintf(c.stderr, "lockctl run: %s ended after the lock on %s was lost: %v\n", command[0], lk.Key(), describe(err))
				return exitLost
			}
			return exitCode(err)
		}
	}
}

// exitCode is lockctl's exit code for a command that ended with err.
func exitCode(err error) int {
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		if err == nil {
			return exitOK
		}
		return exitError
	}
	if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return exitSignal + int(ws.Signal())
	}
	return ee.ExitCode()
}

// describe says how a command ended.
func describe(err error) string {
	if err == nil {
		return "exit status 0"
	}
	return err.Error()
}
