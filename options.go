package locker

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

const (
	// DefaultTTL is how long the store keeps a lock that is not renewed.
	DefaultTTL = 15 * time.Second
	// MinTTL is the shortest TTL accepted: renewals run every TTL/3 and must
	// have time to complete.
	MinTTL = 100 * time.Millisecond
	// DefaultBackoffMin and DefaultBackoffMax bound [DefaultBackoff].
	DefaultBackoffMin = 5 * time.Millisecond
	DefaultBackoffMax = 500 * time.Millisecond
	// DefaultReleaseTimeout bounds the best-effort releases done by Close
	// (see WithReleaseTimeout) and the unlock done by Do and TryDo after
	// their function returned.
	DefaultReleaseTimeout = 5 * time.Second
)

// Backoff returns how long to wait before retry number attempt (0 for the
// first retry). It must be a pure function of attempt: it keeps no state
// between calls, so one Backoff serves every wait of every Locker. The engine
// adds jitter and never waits past the holder's remaining TTL.
type Backoff func(attempt int) time.Duration

// ExponentialBackoff doubles from minDelay up to maxDelay.
func ExponentialBackoff(minDelay, maxDelay time.Duration) Backoff {
	return func(attempt int) time.Duration {
		d := minDelay
		for i := 0; i < attempt && d < maxDelay; i++ {
			d *= 2
		}
		return min(d, maxDelay)
	}
}

// ConstantBackoff always waits d.
func ConstantBackoff(d time.Duration) Backoff {
	return func(int) time.Duration { return d }
}

// DefaultBackoff is ExponentialBackoff(DefaultBackoffMin, DefaultBackoffMax).
func DefaultBackoff() Backoff { return ExponentialBackoff(DefaultBackoffMin, DefaultBackoffMax) }

// Option configures a Locker. Options are shared by every backend; later
// options win. A bad value makes the constructor return an error matching
// [ErrInvalidOption] that names the option.
type Option func(*config) error

// config is the resolved set of options.
type config struct {
	ttl            time.Duration
	prefix         string
	label          string
	backoff        Backoff
	logger         *slog.Logger
	releaseTimeout time.Duration
	onClose        []func() error
	observer       Observer
	// fromURL names the options whose current value came from a URL
	// parameter (see Open): their errors also match ErrBadURL.
	fromURL map[string]string
}

func defaultConfig() config {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown"
	}
	return config{
		ttl:            DefaultTTL,
		label:          host + ":" + strconv.Itoa(os.Getpid()),
		backoff:        DefaultBackoff(),
		logger:         slog.New(slog.DiscardHandler),
		releaseTimeout: DefaultReleaseTimeout,
	}
}

func invalidOption(name string, format string, args ...any) error {
	return fmt.Errorf("%w %s: %s", ErrInvalidOption, name, fmt.Sprintf(format, args...))
}

// invalid is invalidOption for a check made after the options were applied
// (it needs the backend): when the value came from a URL parameter, the
// error names it and also matches ErrBadURL.
func (c *config) invalid(name string, format string, args ...any) error {
	err := invalidOption(name, format, args...)
	if param, ok := c.fromURL[name]; ok {
		return badParam(param, err)
	}
	return err
}

// refusedParam makes a driver's refusal of an option (an error matching
// ErrInvalidOption that names it) also match ErrBadURL when the option's
// value came from a URL parameter.
func (c *config) refusedParam(err error) error {
	if !errors.Is(err, ErrInvalidOption) || errors.Is(err, ErrBadURL) {
		return err
	}
	for name, param := range c.fromURL {
		if strings.Contains(err.Error(), name) {
			return badParam(param, err)
		}
	}
	return err
}

// badParam is the error of a URL parameter whose option was refused: it
// matches ErrBadURL and the option's own error.
func badParam(param string, err error) error { return &paramError{param: param, err: err} }

// paramError is a URL parameter whose option was refused.
type paramError struct {
	param string
	err   error
}

func (p *paramError) Error() string {
	return ErrBadURL.Error() + ": parameter " + p.param + ": " + errText(p.err)
}

func (p *paramError) Unwrap() []error { return []error{ErrBadURL, p.err} }

// WithTTL sets how long the store keeps a lock that is not renewed (default
// [DefaultTTL]). Renewal runs every TTL/3. A holder that cannot reach the store
// loses the lock (Done closes) shortly before TTL has passed since its last
// successful renewal was sent. Backends may require more (etcd: whole seconds,
// at least its minimum lease TTL).
func WithTTL(d time.Duration) Option {
	return func(c *config) error {
		if d < MinTTL {
			return invalidOption("WithTTL", "%v is below the minimum %v", d, MinTTL)
		}
		c.ttl = d
		return nil
	}
}

// WithPrefix puts every key of this Locker in a namespace: the store key is
// prefix+key.
//
// The prefix must end with a separator, "/" or ":", so that Lockers with
// different prefixes never contend ("tenant1"+"2:x" and "tenant12"+":x"
// would be one store key; "tenant1/"+"2:x" and "tenant12/"+":x" are not).
// A prefix that extends another ("a/" and "a/b/") still shares keys with
// it: keep the prefixes of different trust domains apart. It must also be
// valid UTF-8 and leave room for keys within the backend's key limit: New
// names the problem when it does not.
func WithPrefix(prefix string) Option {
	return func(c *config) error {
		if !utf8.ValidString(prefix) {
			return invalidOption("WithPrefix", "the prefix %s is not valid UTF-8", quoteKey(prefix))
		}
		if prefix != "" && !strings.HasSuffix(prefix, "/") && !strings.HasSuffix(prefix, ":") {
			return invalidOption("WithPrefix", "the prefix %s must end with \"/\" or \":\", so that different prefixes never share a key", quoteKey(prefix))
		}
		c.prefix = prefix
		delete(c.fromURL, "WithPrefix")
		return nil
	}
}

// WithOwnerLabel sets the human-readable name of this Locker that backends
// record beside each lock (default host:pid). Ownership checks never use it:
// each acquisition has its own unguessable random token. An empty label,
// and one with a NUL byte, are refused.
func WithOwnerLabel(label string) Option {
	return func(c *config) error {
		if label == "" {
			return invalidOption("WithOwnerLabel", "empty label")
		}
		if strings.IndexByte(label, 0) >= 0 {
			return invalidOption("WithOwnerLabel", "the label contains a NUL byte")
		}
		c.label = label
		return nil
	}
}

// WithBackoff sets the delay between attempts of a waiting Lock on backends
// that poll (default [DefaultBackoff]). Backends that are notified of releases
// use it only as a fallback.
func WithBackoff(b Backoff) Option {
	return func(c *config) error {
		if b == nil {
			return invalidOption("WithBackoff", "nil Backoff")
		}
		c.backoff = b
		return nil
	}
}

// WithLogger sends the Locker's diagnostics (failed renewals, lost locks) to
// l. The default discards them.
func WithLogger(l *slog.Logger) Option {
	return func(c *config) error {
		if l == nil {
			return invalidOption("WithLogger", "nil *slog.Logger")
		}
		c.logger = l
		return nil
	}
}

// WithReleaseTimeout bounds the best-effort releases that Close performs
// (default [DefaultReleaseTimeout]). Do and TryDo, which work with any Locker,
// always use DefaultReleaseTimeout.
func WithReleaseTimeout(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return invalidOption("WithReleaseTimeout", "%v is not positive", d)
		}
		c.releaseTimeout = d
		return nil
	}
}

// WithOnClose makes Close call fn after the Locker has stopped and released
// its locks: for a client the Locker owns, such as one opened from a URL by
// [Open]. Functions run in the order given; their errors are returned by
// Close.
func WithOnClose(fn func() error) Option {
	return func(c *config) error {
		if fn == nil {
			return invalidOption("WithOnClose", "nil function")
		}
		c.onClose = append(c.onClose, fn)
		return nil
	}
}

// Settings are the effective values of a list of shared options.
type Settings struct {
	TTL        time.Duration
	Prefix     string
	OwnerLabel string
	// Logger is the WithLogger logger (one that discards, by default), for
	// the clients a backend creates itself, as when opening a URL.
	Logger *slog.Logger
}

// Resolve applies opts to the defaults and returns the effective settings,
// or the error New would return for them. Backends use it when they need a
// value before New, for example to request a ZooKeeper session as long as
// the TTL.
func Resolve(opts ...Option) (Settings, error) {
	c, err := resolve(opts)
	if err != nil {
		return Settings{}, err
	}
	return Settings{TTL: c.ttl, Prefix: c.prefix, OwnerLabel: c.label, Logger: c.logger}, nil
}

func resolve(opts []Option) (config, error) {
	c := defaultConfig()
	for i, o := range opts {
		if o == nil {
			return c, invalidOption("option", "option %d is nil", i)
		}
		if err := o(&c); err != nil {
			return c, err
		}
	}
	return c, nil
}
