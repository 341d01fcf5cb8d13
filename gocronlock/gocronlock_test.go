package gocronlock_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-co-op/gocron/v2"

	"github.com/golocker/locker"
	"github.com/golocker/locker/gocronlock"
	"github.com/golocker/locker/internal/leakcheck"
	"github.com/golocker/locker/memory"
)

func TestMain(m *testing.M) { leakcheck.Main(m) }

func newLocker(t *testing.T, store *memory.Store) locker.Locker {
	t.Helper()
	l, err := memory.New(store, locker.WithTTL(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

func newJobLocker(t *testing.T, l locker.Locker, opts ...gocronlock.Option) gocron.Locker {
	t.Helper()
	jl, err := gocronlock.NewLocker(l, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return jl
}

func newElector(t *testing.T, l locker.Locker, key string, opts ...gocronlock.Option) *gocronlock.Elector {
	t.Helper()
	e, err := gocronlock.NewElector(l, key, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	return e
}

// TestLockSkipsHeldJobs: one replica gets the job's key, the other's Lock
// fails (gocron skips the run); Unlock with gocron's cancelled Shutdown ctx
// still releases it; Prefix names the key.
func TestLockSkipsHeldJobs(t *testing.T) {
	store := memory.NewStore()
	a := newJobLocker(t, newLocker(t, store), gocronlock.Prefix("app/"))
	b := newJobLocker(t, newLocker(t, store), gocronlock.Prefix("app/"))
	lk, err := a.Lock(t.Context(), "nightly")
	if err != nil {
		t.Fatal(err)
	}
	if _, _, held := store.Holder("app/nightly"); !held {
		t.Error("the key is not the prefix and the job's name")
	}
	if _, err := b.Lock(t.Context(), "nightly"); !errors.Is(err, locker.ErrNotAcquired) {
		t.Fatalf("second replica: %v, want ErrNotAcquired", err)
	}
	cancelled, cancel := context.WithCancel(t.Context())
	cancel()
	if err := lk.Unlock(cancelled); err != nil {
		t.Fatalf("Unlock with a cancelled ctx: %v", err)
	}
	lk, err = b.Lock(t.Context(), "nightly")
	if err != nil {
		t.Fatalf("after the release: %v", err)
	}
	_ = lk.Unlock(t.Context())
}

// TestMinHoldKeepsTheKey: with MinHold the key stays taken after Unlock,
// then is free.
func TestMinHoldKeepsTheKey(t *testing.T) {
	store := memory.NewStore()
	a := newJobLocker(t, newLocker(t, store), gocronlock.MinHold(300*time.Millisecond))
	b := newJobLocker(t, newLocker(t, store))
	start := time.Now()
	lk, err := a.Lock(t.Context(), "job")
	if err != nil {
		t.Fatal(err)
	}
	if err := lk.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
	lk, err = b.Lock(t.Context(), "job")
	if err == nil && time.Since(start) < 300*time.Millisecond {
		t.Fatal("the key was free before its MinHold ended")
	}
	for err != nil {
		if time.Since(start) > 5*time.Second {
			t.Fatalf("the key is still taken 5 s after a MinHold of 300 ms: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
		lk, err = b.Lock(t.Context(), "job")
	}
	_ = lk.Unlock(t.Context())
}

// TestElector: of three replicas made together, exactly one leads from
// the first IsLeader on (gocron's first tick); when its Elector is closed
// (after gocron's Shutdown), the key is free at once and another leads;
// when a leader's Locker closes, another leads too.
func TestElector(t *testing.T) {
	store := memory.NewStore()
	var ls []locker.Locker
	var es []*gocronlock.Elector
	for i := range 3 {
		l, err := memory.New(store, locker.WithTTL(time.Second), locker.WithOwnerLabel(fmt.Sprint(i)))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = l.Close() })
		ls = append(ls, l)
	}
	for _, l := range ls {
		es = append(es, newElector(t, l, "leader", gocronlock.Prefix("app/")))
	}
	leaders := func() []int {
		var who []int
		for i, e := range es {
			switch err := e.IsLeader(t.Context()); {
			case err == nil:
				who = append(who, i)
			case !errors.Is(err, gocronlock.ErrNotLeader):
				t.Fatalf("IsLeader: %v; want nil or ErrNotLeader", err)
			}
		}
		return who
	}
	first := leaders()
	if len(first) != 1 {
		t.Fatalf("replicas %v lead at their first IsLeader; want exactly one (gocron's first tick runs on the leader only)", first)
	}
	wait := func(not ...int) int {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			switch who := leaders(); {
			case len(who) > 1:
				t.Fatalf("replicas %v lead at once", who)
			case len(who) == 1 && !slices.Contains(not, who[0]):
				return who[0]
			}
			if time.Now().After(deadline) {
				t.Fatalf("no new leader within 10 s (replicas %v stepped down)", not)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}

	if err := es[first[0]].Close(); err != nil {
		t.Fatal(err)
	}
	if label, _, held := store.Holder("app/leader"); held && label == fmt.Sprint(first[0]) {
		t.Fatal("the closed Elector still holds the key after Close returned")
	}
	if err := es[first[0]].IsLeader(t.Context()); !errors.Is(err, gocronlock.ErrNotLeader) || !errors.Is(err, locker.ErrClosed) {
		t.Errorf("IsLeader after Close: %v; want ErrNotLeader and ErrClosed", err)
	}
	second := wait(first[0])
	_ = ls[second].Close()
	wait(first[0], second)
}

// TestNewRefusesBadOptions: what would refuse every run is refused when the
// adapter is made.
func TestNewRefusesBadOptions(t *testing.T) {
	l := newLocker(t, memory.NewStore())
	for _, c := range []struct {
		name string
		opts []gocronlock.Option
	}{
		{"negative MinHold", []gocronlock.Option{gocronlock.MinHold(-time.Second)}},
		{"MaxHold under MinHold", []gocronlock.Option{gocronlock.MinHold(2 * time.Second), gocronlock.MaxHold(time.Second)}},
		{"nil Option", []gocronlock.Option{nil}},
		{"nil Logger", []gocronlock.Option{gocronlock.Logger(nil)}},
	} {
		if _, err := gocronlock.NewLocker(l, c.opts...); !errors.Is(err, locker.ErrInvalidOption) {
			t.Errorf("NewLocker with %s: %v; want ErrInvalidOption", c.name, err)
		}
		if _, err := gocronlock.NewElector(l, "k", c.opts...); !errors.Is(err, locker.ErrInvalidOption) {
			t.Errorf("NewElector with %s: %v; want ErrInvalidOption", c.name, err)
		}
	}
	if _, err := gocronlock.NewElector(l, "k", gocronlock.MinHold(time.Second)); !errors.Is(err, locker.ErrInvalidOption) || !strings.Contains(err.Error(), "MinHold") {
		t.Errorf("NewElector with MinHold: %v; want ErrInvalidOption naming MinHold", err)
	}
}

// TestRefusedRunIsLogged: a run the Locker refuses (here: closed) is logged
// at ERROR; a run skipped because another replica holds the key is not.
func TestRefusedRunIsLogged(t *testing.T) {
	store := memory.NewStore()
	var buf bytes.Buffer // the adapter logs on the caller's goroutine
	logger := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo}))
	la, lb := newLocker(t, store), newLocker(t, store)
	a := newJobLocker(t, la)
	b := newJobLocker(t, lb, gocronlock.Logger(logger))
	lk, err := a.Lock(t.Context(), "job")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = lk.Unlock(t.Context()) }()
	if _, err := b.Lock(t.Context(), "job"); !errors.Is(err, locker.ErrNotAcquired) {
		t.Fatalf("Lock of a held job: %v", err)
	}
	if s := buf.String(); s != "" {
		t.Errorf("a run skipped for another replica was logged at INFO or above: %s", s)
	}
	_ = lb.Close()
	if _, err := b.Lock(t.Context(), "job"); !errors.Is(err, locker.ErrClosed) {
		t.Fatalf("Lock on a closed Locker: %v", err)
	}
	if s := buf.String(); !strings.Contains(s, "level=ERROR") || !strings.Contains(s, "job=job") || !strings.Contains(s, "closed") {
		t.Errorf("a run refused by a closed Locker was not logged at ERROR with the job and the error: %q", s)
	}
}

func TestNilLocker(t *testing.T) {
	if _, err := gocronlock.NewLocker(nil); !errors.Is(err, locker.ErrInvalidOption) {
		t.Errorf("NewLocker on a nil Locker: %v", err)
	}
	if _, err := gocronlock.NewElector(nil, "k"); !errors.Is(err, locker.ErrInvalidOption) {
		t.Errorf("NewElector on a nil Locker: %v", err)
	}
}
