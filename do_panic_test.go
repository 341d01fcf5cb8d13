package locker_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"runtime"
	"testing"

	"github.com/golocker/locker"
)

// TestDoReleasesOnPanic: a panic in Do's or TryDo's function releases the
// key, and goes on with its own value to a caller that recovers.
func TestDoReleasesOnPanic(t *testing.T) {
	a, b, _ := newPair(t)
	ctx := t.Context()
	for _, tc := range []struct {
		name string
		do   func(context.Context, locker.Locker, string, func(context.Context) error, ...locker.LockOption) error
	}{{"Do", locker.Do}, {"TryDo", locker.TryDo}} {
		t.Run(tc.name, func(t *testing.T) {
			key := "job-" + tc.name
			type boom struct{ n int }
			want := &boom{n: 7}
			var kept context.Context
			got := func() (p any) {
				defer func() { p = recover() }()
				_ = tc.do(ctx, a, key, func(fctx context.Context) error {
					kept = fctx
					panic(want)
				})
				return nil
			}()
			if got != want {
				t.Fatalf("%s must let fn's panic go on with its value: recovered %v, want %v", tc.name, got, want)
			}
			lk, err := b.TryLock(ctx, key)
			if err != nil {
				t.Fatalf("%s must release the key when fn panics: TryLock from another Locker: %v", tc.name, err)
			}
			if err := lk.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
			if kept.Err() == nil {
				t.Errorf("fn's ctx must be cancelled once %s has returned, by a panic too", tc.name)
			}
		})
	}
}

// TestDoReleasesOnGoexit: fn ending its goroutine (t.FailNow does) releases
// the key too.
func TestDoReleasesOnGoexit(t *testing.T) {
	a, b, _ := newPair(t)
	ctx := t.Context()
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = locker.Do(ctx, a, "job", func(context.Context) error {
			runtime.Goexit()
			return nil
		})
	}()
	<-done
	lk, err := b.TryLock(ctx, "job")
	if err != nil {
		t.Fatalf("Do must release the key when fn calls runtime.Goexit: TryLock from another Locker: %v", err)
	}
	_ = lk.Unlock(ctx)
}

// TestDoUnderHTTPServer: net/http recovers a handler's panic; a Do in the
// handler must not leave the key held behind it.
func TestDoUnderHTTPServer(t *testing.T) {
	a, b, _ := newPair(t)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = locker.Do(r.Context(), a, "job", func(context.Context) error {
			panic(http.ErrAbortHandler) // recovered by net/http without a log line
		})
	}))
	srv.Start()
	defer srv.Close()
	resp, err := srv.Client().Get(srv.URL)
	if err == nil {
		resp.Body.Close()
	}
	lk, err := b.TryLock(t.Context(), "job")
	if err != nil {
		t.Fatalf("Do in a handler whose panic net/http recovered must release the key: TryLock from another Locker: %v", err)
	}
	_ = lk.Unlock(t.Context())
}
