package locker_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/golocker/locker"
	"github.com/golocker/locker/internal/rerun"
	"github.com/golocker/locker/memory"
)

// TestElect: three replicas campaign for one key; one leads at a time, with
// increasing tokens; when the leader's Locker closes (as a killed process's
// leases end), another takes over; every campaign ends, with ErrClosed or
// its ctx's cause.
func TestElect(t *testing.T) {
	const ttl = 300 * time.Millisecond
	// A round whose terms went wrong while the process stalled runs again
	// (rerun.Stalled): a stall longer than the TTL ends a term as the
	// contract allows, and its Done may still be open when the next
	// leader looks. Terms that overlap without a stall fail at once.
	rerun.Stalled(t, 3, ttl, func(int) error {
		store := memory.NewStore()
		var failMu sync.Mutex
		var fails []error
		fail := func(format string, args ...any) {
			failMu.Lock()
			defer failMu.Unlock()
			fails = append(fails, fmt.Errorf(format, args...))
		}
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()

		type term struct {
			replica int
			token   uint64
			done    <-chan struct{}
		}
		var mu sync.Mutex
		var terms []term
		lockers := make([]locker.Locker, 3)
		errs := make(chan error, len(lockers))
		for i := range lockers {
			l, err := memory.New(store, locker.WithTTL(ttl))
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			lockers[i] = l
		}
		for i, l := range lockers {
			go func() {
				errs <- locker.Elect(ctx, l, "leader", func(lctx context.Context) error {
					lk, err := l.TryLock(lctx, "leader") // nested: the term's hold
					if err != nil {
						fail("replica %d inside its term: %v", i, err)
						return err
					}
					mu.Lock()
					if n := len(terms); n > 0 {
						select {
						case <-terms[n-1].done:
						default:
							fail("replica %d leads while replica %d's term is not over", i, terms[n-1].replica)
						}
					}
					terms = append(terms, term{replica: i, token: lk.Token(), done: lk.Done()})
					mu.Unlock()
					<-lctx.Done()
					return nil
				})
			}()
		}
		waitTerms := func(n int) term {
			t.Helper()
			deadline := time.Now().Add(10 * time.Second)
			for {
				mu.Lock()
				if len(terms) >= n {
					tm := terms[n-1]
					mu.Unlock()
					return tm
				}
				mu.Unlock()
				if time.Now().After(deadline) {
					t.Fatalf("no term %d within 10 s", n)
				}
				time.Sleep(5 * time.Millisecond)
			}
		}
		// Close each leader in turn: another replica takes over.
		for n := 1; n <= 2; n++ {
			tm := waitTerms(n)
			if err := lockers[tm.replica].Close(); err != nil {
				t.Fatal(err)
			}
			if err := <-errs; !errors.Is(err, locker.ErrClosed) {
				fail("Elect on a closed Locker returned %v, want ErrClosed", err)
			}
		}
		waitTerms(3)
		cancel()
		if err := <-errs; !errors.Is(err, context.Canceled) {
			fail("Elect after its ctx ended returned %v, want context.Canceled", err)
		}
		mu.Lock()
		defer mu.Unlock()
		for i := 1; i < len(terms); i++ {
			if terms[i].token <= terms[i-1].token || terms[i].replica == terms[i-1].replica {
				fail("terms %v: each must be another replica's, with a higher token", terms)
			}
		}
		failMu.Lock()
		defer failMu.Unlock()
		return errors.Join(fails...)
	})
}

func TestElectRefusesNil(t *testing.T) {
	l, err := memory.New(memory.NewStore())
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	noop := func(context.Context) error { return nil }
	for name, err := range map[string]error{
		"nil ctx":    locker.Elect(nil, l, "k", noop),
		"nil Locker": locker.Elect(t.Context(), nil, "k", noop),
		"nil lead":   locker.Elect(t.Context(), l, "k", nil),
	} {
		if !errors.Is(err, locker.ErrInvalidOption) {
			t.Errorf("Elect with a %s: %v, want ErrInvalidOption", name, err)
		}
	}
}
