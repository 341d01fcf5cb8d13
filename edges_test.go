package locker_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/golocker/locker"
	"github.com/golocker/locker/memory"
)

// secret is the password of every URL of TestOpenNeverShowsSecrets, in
// pieces so that a partial leak is caught too.
const secret = "Hunter2Secret"

func leaks(msg string) bool {
	return strings.Contains(msg, "Hunter2") || strings.Contains(msg, "Secret")
}

// TestOpenNeverShowsSecrets opens malformed URLs, URLs with bad parameters
// and URLs whose backend echoes its DSN, all carrying a password: every one
// fails with a one-line error that matches the documented sentinel, has one
// "locker: " prefix and shows no part of the password.
func TestOpenNeverShowsSecrets(t *testing.T) {
	m, _ := memMux(t)
	// leaky stands for a backend whose client puts the URL, a DSN and the
	// query in its errors. The password is a secret where it is a part of
	// these: Open does not hide its text elsewhere.
	err := m.Register("leaky", func(_ context.Context, u *url.URL, _ ...locker.Option) (locker.Locker, error) {
		p, _ := u.User.Password()
		return nil, fmt.Errorf("dial %s (dsn %s:%s@tcp(%s)/, query %s): connection refused", u, u.User.Username(), p, u.Host, u.RawQuery)
	})
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		url  string
		want error // nil: any error
	}{
		{"mem://u:" + secret + "%zz@host", locker.ErrBadURL},
		{"mem://:" + secret + "%t@host", locker.ErrBadURL},
		{"mem://u:" + secret + "@ho st", locker.ErrBadURL},
		{"mem://u:Hunter2/Secret@host", locker.ErrBadURL},
		{"mem://u:" + secret + "#frag@host", locker.ErrBadURL},
		{"mem://u:" + secret + "?x@host", locker.ErrBadURL},
		{":mem://u:" + secret + "@host", locker.ErrBadURL},
		{"mem ://u:" + secret + "@host", locker.ErrBadURL},
		{"mem://u:" + secret + "@[::1", locker.ErrBadURL},
		{"mem://u:" + secret + "@host\x7f", locker.ErrBadURL},
		{"mem://u:" + secret + "\x00@host", locker.ErrBadURL},
		{"mem://u:Hunter2 Secret@host", locker.ErrBadURL},
		{"mem://u:" + secret + "@host/%", locker.ErrBadURL},
		{"mem://u:" + secret + "@%41host", locker.ErrBadURL},
		{"mem://u:" + secret + "@host:port", locker.ErrBadURL},
		{"mem://u:" + secret + "@host?ttl=1ms", locker.ErrBadURL},
		{"mem://u:" + secret + "@host?ttl=forever", locker.ErrBadURL},
		{"mem://u:" + secret + "@host?prefix=%ff", locker.ErrBadURL},
		{"/u:" + secret + "@host", locker.ErrBadURL},
		{"nosuch://u:" + secret + "@host", locker.ErrUnknownScheme},
		{"u:" + secret + "@127.0.0.1:6379", locker.ErrUnknownScheme},
		{"mem//u:" + secret + "@host", locker.ErrBadURL},
		{"leaky:/u:" + secret + "@host", nil},
		{"leaky:///u:" + secret + "@host", nil},
		{"leaky://h1:1,u:" + secret + "@h2:2", nil},
		{"leaky://u:" + secret + "@host", nil},
		{"leaky://u:Hunter2%2FSecret@host", nil},
		{"leaky://u:Hunter2%20Secret@host", nil},
		{"leaky://host?password=" + secret, nil},
		{"leaky://host?token=" + secret + "&ttl=5s", nil},
		{"leaky://host?sentinel_password=" + secret, nil},
	}
	for _, c := range cases {
		l, err := locker.Open(t.Context(), m, c.url)
		if err == nil {
			_ = l.Close()
			t.Errorf("Open(%q) must fail", c.url)
			continue
		}
		msg := err.Error()
		t.Logf("Open(%q): %s", c.url, msg)
		switch {
		case leaks(msg):
			t.Errorf("Open(%q): the error shows the password: %s", c.url, msg)
		case c.want != nil && !errors.Is(err, c.want):
			t.Errorf("Open(%q) = %v; want an error matching %v", c.url, err, c.want)
		case strings.ContainsAny(msg, "\r\n"):
			t.Errorf("Open(%q): the error spans lines: %q", c.url, msg)
		case strings.Count(msg, "locker:") != 1:
			t.Errorf("Open(%q): the error must have one \"locker:\" prefix: %s", c.url, msg)
		}
	}
}

// TestURLParameterErrorsMatchErrBadURL: a parameter whose option is refused
// matches ErrBadURL, as documented, and ErrInvalidOption, and names the
// parameter and the option once.
func TestURLParameterErrorsMatchErrBadURL(t *testing.T) {
	m, _ := memMux(t)
	for _, raw := range []string{"mem://x?ttl=1ms", "mem://x?prefix=%ff"} {
		_, err := locker.Open(t.Context(), m, raw)
		if !errors.Is(err, locker.ErrBadURL) || !errors.Is(err, locker.ErrInvalidOption) {
			t.Errorf("Open(%q) = %v; want an error matching ErrBadURL and ErrInvalidOption", raw, err)
			continue
		}
		if msg := err.Error(); !strings.Contains(msg, "parameter") || strings.Count(msg, "memory") != 1 {
			t.Errorf("Open(%q): the error must name the parameter and the backend once: %s", raw, msg)
		}
	}
}

// TestDoErrorIsOneLine: when fn fails and the lock is lost, Do's error
// matches both, on one line.
func TestDoErrorIsOneLine(t *testing.T) {
	store := memory.NewStore()
	l, err := memory.New(store, locker.WithTTL(time.Second), locker.WithPrefix("p/"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	errFn := errors.New("job failed")
	err = locker.Do(t.Context(), l, "k", func(ctx context.Context) error {
		store.DeleteKey("p/k")
		<-ctx.Done()
		return errFn
	})
	if !errors.Is(err, errFn) || !errors.Is(err, locker.ErrLost) {
		t.Fatalf("Do = %v; want an error matching the function's error and ErrLost", err)
	}
	if msg := err.Error(); strings.ContainsAny(msg, "\r\n") || strings.Count(msg, "locker:") != 1 {
		t.Errorf("Do's error must be one line with one \"locker:\" prefix: %q", msg)
	}
}

// TestNestedErrorsDoNotStutter: an Error wrapping another names the package
// and the backend once.
func TestNestedErrorsDoNotStutter(t *testing.T) {
	_, err := memory.New(memory.NewStore(), locker.WithTTL(time.Millisecond))
	outer := &locker.Error{Op: "open", Backend: "memory", Cause: err}
	msg := outer.Error()
	if strings.Count(msg, "locker:") != 1 || strings.Count(msg, "memory") != 1 || !strings.Contains(msg, "WithTTL") {
		t.Errorf("nested errors must name the package and backend once and keep the cause: %q", msg)
	}
	if !errors.Is(outer, locker.ErrInvalidOption) {
		t.Errorf("the nested error must still match ErrInvalidOption: %v", outer)
	}
}

// TestPrefixesNeverShareKeys: prefixes end with a separator, so that two
// tenants' keys never meet in the store.
func TestPrefixesNeverShareKeys(t *testing.T) {
	store := memory.NewStore()
	if _, err := memory.New(store, locker.WithPrefix("tenant1")); !errors.Is(err, locker.ErrInvalidOption) || !strings.Contains(err.Error(), "must end with") {
		t.Fatalf("a prefix without a separator must be refused: %v", err)
	}
	a, err := memory.New(store, locker.WithPrefix("tenant1/"))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := memory.New(store, locker.WithPrefix("tenant12/"))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	la, err := a.TryLock(t.Context(), "2:x")
	if err != nil {
		t.Fatal(err)
	}
	defer la.Unlock(t.Context())
	lb, err := b.TryLock(t.Context(), ":x")
	if err != nil {
		t.Fatalf("tenant12/ + \":x\" must not contend with tenant1/ + \"2:x\": %v", err)
	}
	_ = lb.Unlock(t.Context())
}
