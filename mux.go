package locker

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"
)

// ErrUnknownScheme is returned by [Open] for a URL whose scheme no backend is
// registered for; the message lists the known schemes.
var ErrUnknownScheme = errors.New("locker: unknown URL scheme")

// ErrBadURL is returned by [Open] for a URL that cannot be parsed or whose
// parameters are invalid; the message names the problem.
var ErrBadURL = errors.New("locker: bad locker URL")

// OpenFunc opens a Locker for a URL of the scheme it is registered for. It
// creates its own client from the URL, and the returned Locker owns it:
// closing the Locker closes the client (see [WithOnClose]). opts are the
// shared options, already including the URL's ttl and prefix parameters.
type OpenFunc func(ctx context.Context, u *url.URL, opts ...Option) (Locker, error)

// Mux maps URL schemes to the backends that open them, so that the backend is
// chosen by configuration alone ("redis://…" in production, "etcd://…" in
// staging). The application fills it explicitly; nothing registers itself.
// The zero Mux is empty and ready to use; it is safe for concurrent use.
type Mux struct {
	mu      sync.RWMutex
	schemes map[string]OpenFunc
}

// Register makes scheme (lower case, without "://") open with fn. It returns
// an error for an empty or invalid scheme, a nil fn, or a scheme registered
// twice.
func (m *Mux) Register(scheme string, fn OpenFunc) error {
	if scheme == "" || strings.ToLower(scheme) != scheme || strings.ContainsAny(scheme, ":/ ") {
		return fmt.Errorf("%w: register: invalid scheme %q", ErrInvalidOption, scheme)
	}
	if fn == nil {
		return fmt.Errorf("%w: register %q: nil OpenFunc", ErrInvalidOption, scheme)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, dup := m.schemes[scheme]; dup {
		return fmt.Errorf("%w: register: scheme %q already registered", ErrInvalidOption, scheme)
	}
	if m.schemes == nil {
		m.schemes = make(map[string]OpenFunc)
	}
	m.schemes[scheme] = fn
	return nil
}

// Schemes returns the registered schemes, sorted.
func (m *Mux) Schemes() []string {
	m.mu.RLock()
	defer m.mu.RUnlock()
	s := make([]string, 0, len(m.schemes))
	for k := range m.schemes {
		s = append(s, k)
	}
	slices.Sort(s)
	return s
}

// Open opens a Locker for rawURL with the backend m has for its scheme.
//
// The query parameters ttl (a Go duration, "10s") and prefix are understood
// for every scheme and applied after opts, so configuration overrides code
// defaults; other parameters belong to the backend. A malformed URL or
// parameter gives an error matching [ErrBadURL] that names it; an unknown
// scheme gives [ErrUnknownScheme] listing the known ones.
func Open(ctx context.Context, m *Mux, rawURL string, opts ...Option) (Locker, error) {
	if m == nil {
		return nil, &Error{Op: "open", Err: ErrInvalidOption, Cause: errors.New("nil *Mux")}
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, &Error{Op: "open", Err: ErrBadURL, Cause: err}
	}
	if u.Scheme == "" {
		return nil, &Error{Op: "open", Err: ErrBadURL, Cause: fmt.Errorf("%s has no scheme; known schemes: %s", redact(u), strings.Join(m.Schemes(), ", "))}
	}
	m.mu.RLock()
	fn := m.schemes[u.Scheme]
	m.mu.RUnlock()
	if fn == nil {
		return nil, &Error{Op: "open", Backend: u.Scheme, Err: ErrUnknownScheme, Cause: fmt.Errorf("%q in %s; known schemes: %s", u.Scheme, redact(u), strings.Join(m.Schemes(), ", "))}
	}
	q := u.Query()
	opts = slices.Clone(opts)
	if v := q.Get("ttl"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			return nil, &Error{Op: "open", Backend: u.Scheme, Err: ErrBadURL, Cause: fmt.Errorf("parameter ttl=%q: %v", v, err)}
		}
		opts = append(opts, WithTTL(d))
	}
	if q.Has("prefix") {
		opts = append(opts, WithPrefix(q.Get("prefix")))
	}
	l, err := fn(ctx, u, opts...)
	if err != nil {
		return nil, &Error{Op: "open", Backend: u.Scheme, Cause: err}
	}
	return l, nil
}

// redact returns u as a string without its password, for error messages.
func redact(u *url.URL) string { return u.Redacted() }
