package locker

import (
	"errors"
	"strconv"
	"strings"
	"unicode/utf8"
)

var (
	// ErrNotAcquired is returned by TryLock and TryDo when the key is held
	// elsewhere, and by Lock and Do when their ctx ended before the key was
	// acquired (the error then also matches ctx.Err()).
	ErrNotAcquired = errors.New("locker: not acquired")

	// ErrNotHeld is returned by Unlock when the lock was already released or
	// lost. The store is left untouched: it never releases another owner's
	// lock.
	ErrNotHeld = errors.New("locker: not held")

	// ErrLost is what Lock.Err returns (wrapping the cause) once a held lock
	// was lost: its state vanished from the store, another owner took it,
	// renewals failed until the local deadline, or its Locker was closed. Do
	// cancels its function's ctx with this cause.
	ErrLost = errors.New("locker: lock lost")

	// ErrClosed is returned by Lock, TryLock and the reads (Inspect, List)
	// of a closed Locker, and ends the waits that were in progress when it
	// was closed.
	ErrClosed = errors.New("locker: locker closed")

	// ErrInvalidKey is returned for a key the backend cannot store: empty,
	// not valid UTF-8, or longer than the backend's limit (the message names
	// the limit).
	ErrInvalidKey = errors.New("locker: invalid key")

	// ErrInvalidOption is returned by constructors for an option value they
	// cannot honour; the message names the option.
	ErrInvalidOption = errors.New("locker: invalid option")
)

// Error records a failed operation: which operation, on which backend and key,
// the sentinel it matches (Err) and the underlying cause (a ctx error, the
// backend's own error). errors.Is and errors.As see both Err and Cause.
type Error struct {
	// Op is the operation: "lock", "trylock", "unlock", "renew", "new", "close".
	Op string
	// Backend names the backend, e.g. "redis".
	Backend string
	// Key is the caller's key, without prefix; empty for Locker-wide errors.
	Key string
	// Err is one of the package's sentinels, or nil.
	Err error
	// Cause is the underlying error, or nil.
	Cause error
}

// Error implements error. The text is one line with one "locker: " prefix,
// however deeply errors of this package are wrapped in each other.
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("locker: ")
	e.write(&b, "")
	return b.String()
}

// write appends e's text without the package prefix, leaving out the backend
// when an enclosing Error already named it.
func (e *Error) write(b *strings.Builder, outerBackend string) {
	b.WriteString(e.Op)
	if e.Backend != "" && e.Backend != outerBackend {
		b.WriteString(" ")
		b.WriteString(e.Backend)
	}
	if e.Key != "" {
		b.WriteString(" ")
		b.WriteString(quoteKey(e.Key))
	}
	if e.Err != nil {
		b.WriteString(": ")
		b.WriteString(errText(e.Err))
	}
	if e.Cause != nil {
		b.WriteString(": ")
		backend := e.Backend
		if backend == "" {
			backend = outerBackend
		}
		b.WriteString(causeText(e.Cause, backend))
	}
}

// causeText is the text of an Error's cause: nested Errors of this package
// without their prefix and without the backend already named.
func causeText(cause error, backend string) string {
	switch c := cause.(type) {
	case *Error:
		var b strings.Builder
		c.write(&b, backend)
		return b.String()
	case scrubbed:
		return c.scrub(causeText(c.err, backend))
	}
	return errText(cause)
}

// errText is err's text on one line, without this package's prefix.
func errText(err error) string {
	return oneLine(strings.TrimPrefix(err.Error(), "locker: "))
}

// oneLine joins the lines of a multi-line error text (errors.Join makes
// them) with "; ", so that every error of this package fits one log record.
func oneLine(s string) string {
	if !strings.ContainsAny(s, "\r\n") {
		return s
	}
	parts := strings.FieldsFunc(s, func(r rune) bool { return r == '\n' || r == '\r' })
	return strings.Join(parts, "; ")
}

// joined is several errors as one: errors.Is and errors.As see each of them,
// and, unlike errors.Join, its text is one line.
type joined []error

// join returns nil, the one non-nil error, or a joined of the non-nil errors.
func join(errs ...error) error {
	var j joined
	for _, err := range errs {
		if err != nil {
			j = append(j, err)
		}
	}
	switch len(j) {
	case 0:
		return nil
	case 1:
		return j[0]
	}
	return j
}

func (j joined) Error() string {
	parts := make([]string, len(j))
	for i, err := range j {
		parts[i] = oneLine(err.Error())
	}
	return strings.Join(parts, "; ")
}

func (j joined) Unwrap() []error { return j }

// Unwrap returns the sentinel and the cause.
func (e *Error) Unwrap() []error {
	errs := make([]error, 0, 2)
	if e.Err != nil {
		errs = append(errs, e.Err)
	}
	if e.Cause != nil {
		errs = append(errs, e.Cause)
	}
	return errs
}

// quoteKey quotes a key for an error message, escaping control characters
// and invalid UTF-8 and shortening very long keys.
func quoteKey(k string) string {
	const max = 64
	if len(k) <= max {
		return strconv.Quote(k)
	}
	cut := max
	for cut > 0 && !utf8.RuneStart(k[cut]) {
		cut--
	}
	return strconv.Quote(k[:cut]) + "…"
}
