//go:build unix

// Command lockctl uses locker's locks from the shell, on any backend a
// locker URL names: it runs a command under a lock, tells who holds a key
// or lists the held keys (live with top), and frees a key for operators.
//
//	go install github.com/golocker/locker/cmd/lockctl@latest
//
// # run
//
//	lockctl run [--url URL] [--try [--quiet]] [--ttl D] [--min-hold D] [--max-hold D] [--grace D] [--owner NAME] [--data S] [--limit M [--permits N]] KEY -- CMD [ARGS…]
//
// run takes KEY (waiting for it, or with --try giving up at once when it is
// held), then runs CMD with LOCKER_KEY, LOCKER_TOKEN (the fencing token) and
// LOCKER_OWNER (the owner label) added to its environment, and releases the
// key when CMD ends. With --quiet, a --try that finds KEY held prints
// nothing (cron mails what a job prints); its exit code still says so. A
// crontab line on every host then runs the job once per tick, on any
// backend:
//
//	# crontab of every host
//	* * * * * lockctl run --url redis://10.0.0.5:6379 --try --quiet --min-hold 10s nightly-report -- ./report.sh
//
// With --limit M, KEY is a semaphore of M permits and run takes --permits N
// of them (default 1): at most M permits are held at once, store-wide. A
// --limit that differs from the one of KEY's holders is refused (exit 2),
// naming both.
//
//	lockctl run --limit 4 render -- ./render.sh
//
// With --min-hold, the key stays taken until the MinHold ends, in the
// store, after lockctl exited; on ZooKeeper, whose kept node lives with the
// session, lockctl itself stays until then (a signal ends the stay early).
//
// CMD runs in a process group of its own. SIGINT, SIGTERM, SIGHUP, SIGQUIT,
// SIGUSR1, SIGUSR2 and SIGWINCH sent to lockctl are passed on to that group.
// When the lock is lost (the key expired or was freed by "lockctl unlock
// --force", or --max-hold passed), lockctl sends SIGTERM to the group, then
// SIGKILL after --grace, says so on stderr and exits 70.
//
// # inspect
//
//	lockctl inspect [--url URL] [--json] KEY
//
// inspect prints who holds KEY: the owner label, fencing token, when it was
// taken and when it expires unless renewed, how many waiters are queued,
// and the holder's data (run --data, locker.WithData): in JSON as "data"
// when it is UTF-8 text, as "data_base64" when it is not.
// For a semaphore's or read-write lock's key it prints every holder (mode,
// weight, token, expiry, owner label), the limit and the permits in use.
//
// # ls
//
//	lockctl ls [--url URL] [--json] [PREFIX]
//
// ls prints every key held under PREFIX (all keys without it), with the
// fields of inspect, as a table or with --json as an array of inspect's
// objects. It reads the store a page at a time, so it works for any number
// of keys. Keys taken or freed while it runs may or may not show.
//
// # top
//
//	lockctl top [--url URL] [--interval D] [PREFIX]
//
// top shows the keys held under PREFIX live in the terminal, read again
// every --interval (default 1s): most waiters first, then the longest held.
// q or Ctrl-C quits.
//
// # unlock
//
//	lockctl unlock --force [--url URL] KEY
//
// unlock frees KEY whoever holds it, for operators; it is refused without
// --force. The holder's "lockctl run" sees its lock lost at its next renewal
// (a third of the TTL) and stops its command.
//
// # URL
//
// --url takes a locker URL of any built-in backend (redis://, rediss://,
// mysql://, postgres://, postgresql://, etcd://, etcds://, zk://; see
// package backends), default $LOCKER_URL. Passwords and secret parameters
// of the URL are never printed, in errors either. Flags may come before or
// after KEY, up to "--".
//
// # Exit codes
//
//	0        success (run: CMD exited 0)
//	1        a store or other error, or (unlock) nobody held KEY
//	2        usage error: a bad flag, KEY or URL, or a flag value the backend refuses
//	70       run: the lock was lost while CMD ran (EX_SOFTWARE)
//	75       run --try: KEY is held elsewhere (or its permits are taken); CMD did not run (EX_TEMPFAIL)
//	126, 127 run: CMD could not be run (not executable, not found)
//	128+N    run: CMD (or the wait for KEY) ended by signal N
//	other    run: CMD's own exit status
//
// A CMD that itself exits 70 or 75 cannot be told from lockctl's codes.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/signal"
	"regexp"
	"strings"
	"syscall"
	"time"

	"github.com/golocker/locker"
	"github.com/golocker/locker/backends"
)

// Exit codes.
const (
	exitOK          = 0
	exitError       = 1
	exitUsage       = 2
	exitLost        = 70 // EX_SOFTWARE
	exitNotAcquired = 75 // EX_TEMPFAIL
	exitCannotExec  = 126
	exitNotFound    = 127
	exitSignal      = 128 // plus the signal number
)

// openTimeout bounds opening the store (connecting, creating MySQL's table).
const openTimeout = 30 * time.Second

// releaseTimeout bounds the release of the key after CMD ended.
const releaseTimeout = 10 * time.Second

// defaultGrace is how long a command has after SIGTERM, once the lock is
// lost, before SIGKILL.
const defaultGrace = 10 * time.Second

const usage = `lockctl uses locker's locks from the shell, on any backend.

Usage:
  lockctl run [--url URL] [--try [--quiet]] [--ttl D] [--min-hold D] [--max-hold D] [--grace D] [--owner NAME] [--data S] [--limit M [--permits N]] KEY -- CMD [ARGS...]
  lockctl inspect [--url URL] [--json] KEY
  lockctl ls [--url URL] [--json] [PREFIX]
  lockctl top [--url URL] [--interval D] [PREFIX]
  lockctl unlock --force [--url URL] KEY

run takes KEY, runs CMD with LOCKER_KEY, LOCKER_TOKEN and LOCKER_OWNER in its
environment, passes signals on to it, and releases KEY when it ends. When the
lock is lost, CMD gets SIGTERM, then SIGKILL after --grace, and lockctl exits 70.
With --limit M, KEY is a semaphore of M permits and CMD runs under --permits N.
--url defaults to $LOCKER_URL; flags may come before or after KEY, up to "--".

Examples:
  export LOCKER_URL=redis://127.0.0.1:6379
  lockctl run --try --quiet --min-hold 10s nightly-report -- ./report.sh
  lockctl run --url etcd://10.0.0.1:2379,10.0.0.2:2379 migrate -- ./migrate.sh up
  lockctl run --limit 4 render -- ./render.sh
  lockctl run --limit 8 --permits 2 --try imports -- ./import.sh
  lockctl inspect nightly-report
  lockctl inspect --json nightly-report
  lockctl ls nightly-
  lockctl ls --json
  lockctl top jobs/
  lockctl unlock --force nightly-report

Exit codes: 0 ok; 1 store or other error (unlock: nobody held KEY); 2 usage
(a bad flag, KEY or URL);
70 lock lost while CMD ran; 75 --try and KEY held elsewhere; 126/127 CMD not
executable/not found; 128+N CMD ended by signal N; else CMD's exit status.
`

func main() {
	quietClients()
	os.Exit(lockctl(os.Args[1:], os.Stdout, os.Stderr))
}

// lockctl runs the command line args and returns the exit code.
func lockctl(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return exitUsage
	}
	switch args[0] {
	case "run":
		return runCmd(args[1:], stdout, stderr)
	case "inspect":
		return inspectCmd(args[1:], stdout, stderr)
	case "unlock":
		return unlockCmd(args[1:], stdout, stderr)
	case "ls":
		return lsCmd(args[1:], stdout, stderr)
	case "top":
		return topCmd(args[1:], stdout, stderr)
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, usage)
		return exitOK
	}
	fmt.Fprintf(stderr, "lockctl: unknown command %q; want run, inspect, ls, top or unlock (see lockctl --help)\n", args[0])
	return exitUsage
}

// cli is what every subcommand shares: its flags, the URL and the output.
type cli struct {
	name   string
	fs     *flag.FlagSet
	url    string
	stdout io.Writer
	stderr io.Writer
}

func newCLI(name string, stdout, stderr io.Writer) *cli {
	c := &cli{name: name, stdout: stdout, stderr: stderr}
	c.fs = flag.NewFlagSet("lockctl "+name, flag.ContinueOnError)
	c.fs.SetOutput(io.Discard)
	c.fs.StringVar(&c.url, "url", "", "locker URL (default $LOCKER_URL)")
	return c
}

// errHelp is returned by parse for -h and --help.
var errHelp = errors.New("help requested")

// parse parses args, whose flags may come before or after the positional
// arguments, and returns the positional arguments. Nothing after "--" is
// parsed.
func (c *cli) parse(args []string) ([]string, error) {
	var pos []string
	for {
		if err := c.fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, errHelp
			}
			// The flag package names a flag -ttl; lockctl's usage says --ttl.
			return nil, errors.New(singleDash.ReplaceAllString(err.Error(), "$1--$2"))
		}
		if c.fs.NArg() == 0 {
			break
		}
		pos = append(pos, c.fs.Arg(0))
		args = c.fs.Args()[1:]
	}
	if c.url == "" {
		c.url = os.Getenv("LOCKER_URL")
	}
	if c.url == "" {
		return nil, errors.New("no store: give --url or set LOCKER_URL")
	}
	return pos, nil
}

// usageError reports a usage error and returns its exit code.
func (c *cli) usageError(err error) int {
	if errors.Is(err, errHelp) {
		fmt.Fprintf(c.stdout, "%s\nFlags of lockctl %s:\n", usage, c.name)
		c.fs.SetOutput(c.stdout)
		c.fs.PrintDefaults()
		return exitOK
	}
	fmt.Fprintf(c.stderr, "lockctl %s: %s (see lockctl --help)\n", c.name, c.text(err))
	return exitUsage
}

// fail reports err and returns its exit code: exitUsage for the user's
// mistake, else exitError.
func (c *cli) fail(err error) int {
	if usageMistake(err) {
		return c.usageError(err)
	}
	fmt.Fprintf(c.stderr, "lockctl %s: %s\n", c.name, c.text(err))
	return exitError
}

// text is err's message for the user: the URL's secrets are hidden, and a
// refused option is named by lockctl's flag, not by the library's option.
func (c *cli) text(err error) string {
	msg := locker.RedactURL(err, c.url).Error()
	if errors.Is(err, locker.ErrInvalidOption) && !errors.Is(err, locker.ErrBadURL) {
		msg = optionName.ReplaceAllStringFunc(msg, func(name string) string { return optionFlags[name] })
	}
	return msg
}

// usageMistake reports whether err is the user's mistake (a bad URL, KEY or
// flag value) rather than the store's.
func usageMistake(err error) bool {
	return errors.Is(err, locker.ErrBadURL) || errors.Is(err, locker.ErrUnknownScheme) ||
		errors.Is(err, locker.ErrInvalidOption) || errors.Is(err, locker.ErrInvalidKey)
}

// optionFlags is lockctl's flag for each option the library's errors name.
var optionFlags = map[string]string{
	"WithTTL":        "--ttl",
	"MinHold":        "--min-hold",
	"MaxHold":        "--max-hold",
	"WithOwnerLabel": "--owner",
}

// optionName matches the names of optionFlags in an error's text.
var optionName = regexp.MustCompile(`\b(WithTTL|MinHold|MaxHold|WithOwnerLabel)\b`)

// singleDash matches a flag named with one dash in the flag package's errors.
var singleDash = regexp.MustCompile(`(^|[ :])-([A-Za-z])`)

// open opens the Locker of c.url with every built-in backend.
func (c *cli) open(ctx context.Context, opts ...locker.Option) (locker.Locker, error) {
	var mux locker.Mux
	if err := backends.Register(&mux); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, openTimeout)
	defer cancel()
	return locker.Open(ctx, &mux, c.url, opts...)
}

// onKey parses args for one KEY, runs check (the subcommand's own checks
// of its flags; nil for none), opens the store and calls do with a ctx that
// ends at SIGINT, SIGTERM or SIGHUP; it returns the exit code.
func (c *cli) onKey(args []string, check func() error, do func(ctx context.Context, l locker.Locker, key string) int) int {
	pos, err := c.parse(args)
	if err != nil {
		return c.usageError(err)
	}
	key, err := oneKey(pos)
	if err == nil && check != nil {
		err = check()
	}
	if err != nil {
		return c.usageError(err)
	}
	return c.withStore(func(ctx context.Context, l locker.Locker) int { return do(ctx, l, key) })
}

// withStore opens the store and calls do with a ctx that ends at SIGINT,
// SIGTERM or SIGHUP; it returns the exit code.
func (c *cli) withStore(do func(ctx context.Context, l locker.Locker) int) int {
	ctx, cancel := interrupted()
	defer cancel()
	l, err := c.open(ctx)
	if err != nil {
		return c.fail(err)
	}
	defer l.Close()
	return do(ctx, l)
}

// urlHas reports whether c.url has query parameter name.
func (c *cli) urlHas(name string) bool {
	u, err := url.Parse(c.url)
	return err == nil && u.Query().Has(name)
}

// oneKey checks that pos is exactly one key.
func oneKey(pos []string) (string, error) {
	switch {
	case len(pos) == 0:
		return "", errors.New("no KEY")
	case len(pos) > 1:
		return "", fmt.Errorf("one KEY expected, got %s", strings.Join(pos, " "))
	}
	return pos[0], nil
}

// signals are the signals run passes on to its command.
var signals = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT,
	syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGWINCH}

// interrupted returns a ctx that ends at SIGINT, SIGTERM or SIGHUP, for the
// commands that do not run a child.
func interrupted() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
}
