package locker_test

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"testing"

	"github.com/golocker/locker"
	"github.com/golocker/locker/memory"
)

func memMux(t *testing.T) (*locker.Mux, *int) {
	t.Helper()
	store := memory.NewStore()
	closed := new(int)
	var m locker.Mux
	err := m.Register("mem", func(ctx context.Context, u *url.URL, opts ...locker.Option) (locker.Locker, error) {
		opts = append(opts, locker.WithOnClose(func() error { *closed++; return nil }))
		return memory.New(store, opts...)
	})
	if err != nil {
		t.Fatal(err)
	}
	return &m, closed
}

func TestOpenURL(t *testing.T) {
	m, closed := memMux(t)
	l, err := locker.Open(t.Context(), m, "mem://local?ttl=2s&prefix=app:")
	if err != nil {
		t.Fatal(err)
	}
	lk, err := l.TryLock(t.Context(), "k")
	if err != nil {
		t.Fatal(err)
	}
	if err := lk.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil || *closed != 1 {
		t.Fatalf("Close must run the OnClose functions once: err %v, ran %d", err, *closed)
	}
}

func TestOpenBadURLs(t *testing.T) {
	m, _ := memMux(t)
	cases := []struct {
		url  string
		want error
		says string
	}{
		{"nosuch://host", locker.ErrUnknownScheme, "known schemes: mem"},
		{"localhost:6379", locker.ErrUnknownScheme, `"localhost"`},
		{"/just/a/path", locker.ErrBadURL, "no scheme"},
		{"mem://x?ttl=soon", locker.ErrBadURL, "ttl"},
		{"mem://x?ttl=1ms", locker.ErrInvalidOption, "WithTTL"},
		{"mem://%zz", locker.ErrBadURL, "invalid URL escape"},
		{"redis://user:secret@host/0", locker.ErrUnknownScheme, "xxxxx"},
	}
	for _, c := range cases {
		l, err := locker.Open(t.Context(), m, c.url)
		if err == nil {
			l.Close()
			t.Errorf("Open(%q) must fail", c.url)
			continue
		}
		if !errors.Is(err, c.want) || !strings.Contains(err.Error(), c.says) {
			t.Errorf("Open(%q) = %v; want an error matching %v that says %q", c.url, err, c.want, c.says)
		}
		if strings.Contains(err.Error(), "secret") {
			t.Errorf("Open(%q): the error must not show the password: %v", c.url, err)
		}
	}
	if _, err := locker.Open(t.Context(), nil, "mem://x"); !errors.Is(err, locker.ErrInvalidOption) {
		t.Errorf("nil Mux: %v", err)
	}
}

func TestMuxRegister(t *testing.T) {
	var m locker.Mux
	open := func(context.Context, *url.URL, ...locker.Option) (locker.Locker, error) { return nil, errors.New("x") }
	for _, bad := range []string{"", "Redis", "a:b", "a/b"} {
		if err := m.Register(bad, open); !errors.Is(err, locker.ErrInvalidOption) {
			t.Errorf("Register(%q): want ErrInvalidOption, got %v", bad, err)
		}
	}
	if err := m.Register("x", nil); !errors.Is(err, locker.ErrInvalidOption) {
		t.Errorf("nil OpenFunc: %v", err)
	}
	if err := m.Register("x", open); err != nil {
		t.Fatal(err)
	}
	if err := m.Register("x", open); !errors.Is(err, locker.ErrInvalidOption) {
		t.Errorf("duplicate scheme: %v", err)
	}
}
