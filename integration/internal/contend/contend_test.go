package contend

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golocker/locker"
)

// fakeHeld is a lock whose Unlock returns err and whose Deadline is
// deadline.
type fakeHeld struct {
	err      error
	deadline time.Time
}

func (f fakeHeld) Unlock(context.Context) error { return f.err }
func (f fakeHeld) Deadline() time.Time          { return f.deadline }

// TestCheckedUnlock: an Unlock that finds the lock gone is an allowed loss
// only once its Done was closed or its Deadline had passed; a key gone
// while the Deadline was ahead stays an error that fails the run.
func TestCheckedUnlock(t *testing.T) {
	notHeld := &locker.Error{Op: "unlock", Backend: "test", Key: "k", Err: locker.ErrNotHeld, Cause: errors.New("release: not held")}
	lost := &locker.Error{Op: "unlock", Backend: "test", Key: "k", Err: locker.ErrNotHeld,
		Cause: &locker.Error{Op: "hold", Backend: "test", Key: "k", Err: locker.ErrLost, Cause: errors.New("no renewal")}}
	other := errors.New("connection reset")
	past, ahead := time.Now().Add(-time.Millisecond), time.Now().Add(time.Hour)
	for _, c := range []struct {
		name    string
		lk      fakeHeld
		allowed bool
	}{
		{"store found it gone after its Deadline", fakeHeld{notHeld, past}, true},
		{"Done closed before the Unlock", fakeHeld{lost, ahead}, true},
		{"store found it gone before its Deadline", fakeHeld{notHeld, ahead}, false},
		{"another error past the Deadline", fakeHeld{other, past}, false},
		{"released", fakeHeld{nil, past}, false},
	} {
		err := checkedUnlock(t.Context(), c.lk)
		if got := errors.Is(err, ErrAllowedLoss); got != c.allowed {
			t.Errorf("%s: checkedUnlock = %v; allowed loss %v, want %v", c.name, err, got, c.allowed)
		}
		if !errors.Is(err, c.lk.err) {
			t.Errorf("%s: checkedUnlock = %v; want it to wrap %v", c.name, err, c.lk.err)
		}
	}
}

// TestRunCountsAllowedLosses: a run whose Unlocks find the lock gone as
// the contract allows counts them and ends without failing; a fault fails
// it.
func TestRunCountsAllowedLosses(t *testing.T) {
	notHeld := &locker.Error{Op: "unlock", Backend: "test", Key: "k", Err: locker.ErrNotHeld, Cause: errors.New("release: not held")}
	// The clients of a run share one sync.Mutex, and every third Unlock
	// reports the key gone deadline from now.
	mutex := func(mu *sync.Mutex, n *atomic.Int64, deadline time.Duration) Mutex {
		return Func(func(context.Context) (func(context.Context) error, error) {
			mu.Lock()
			return func(ctx context.Context) error {
				mu.Unlock()
				if n.Add(1)%3 != 0 {
					return nil
				}
				return checkedUnlock(ctx, fakeHeld{notHeld, time.Now().Add(deadline)})
			}, nil
		})
	}
	for _, c := range []struct {
		deadline time.Duration
		fails    bool
	}{{-time.Millisecond, false}, {time.Hour, true}} {
		var (
			tl tally
			mu sync.Mutex
			n  atomic.Int64
		)
		r := testing.Benchmark(func(b *testing.B) {
			run(b, Impl{Name: "test"}, []Mutex{mutex(&mu, &n, c.deadline), mutex(&mu, &n, c.deadline)}, 20*time.Millisecond, true, ctxKinds[0], &tl)
		})
		if failed := r.N == 0; failed != c.fails {
			t.Errorf("a run whose every third Unlock finds the key gone %v after its Deadline: failed %v, want %v", -c.deadline, failed, c.fails)
			continue
		}
		if c.fails {
			continue
		}
		if res := tl.result(); res.Losses == 0 || res.Losses > res.Acquisitions || !strings.Contains(fmt.Sprint(res.FirstLoss), "not held") {
			t.Errorf("%d acquisitions counted %d allowed losses, the first %v; want about a third, naming the Unlock error", res.Acquisitions, res.Losses, res.FirstLoss)
		}
	}
}

// TestRunCountsAgain: on one key, an acquisition by the client that had
// held the key last counts as again; one handed to the other client does
// not.
func TestRunCountsAgain(t *testing.T) {
	// Two clients pass one token: a client's Lock takes it from its own
	// channel, its Unlock hands it, marked with the client's number, to
	// the other client's. A client that finds its handed token untaken
	// for a while takes it back: the other client may have seen the run's
	// end and stopped after this client's last look at the clock, or (on
	// a loaded machine) not started before the run's end. A token taken
	// back by the client that handed it is one acquisition again. Every
	// run starts with the token, handed by nobody, in client 0's channel.
	chs := [2]chan int{make(chan int, 1), make(chan int, 1)}
	var takenBack atomic.Int64
	resetTurns := func() {
		for _, ch := range chs {
			select {
			case <-ch:
			default:
			}
		}
		chs[0] <- -1
		takenBack.Store(0)
	}
	turns := make([]Mutex, 2)
	for i := range turns {
		turns[i] = Func(func(ctx context.Context) (func(context.Context) error, error) {
			grace := time.NewTimer(200 * time.Millisecond)
			defer grace.Stop()
			var from int
			select {
			case from = <-chs[i]:
			case <-grace.C:
				select {
				case from = <-chs[i]:
				case from = <-chs[1-i]:
				case <-ctx.Done():
					return nil, ctx.Err()
				}
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			if from == i {
				takenBack.Add(1)
			}
			return func(context.Context) error { chs[1-i] <- i; return nil }, nil
		})
	}
	var mu sync.Mutex
	alone := Func(func(context.Context) (func(context.Context) error, error) {
		mu.Lock()
		return func(context.Context) error { mu.Unlock(); return nil }, nil
	})
	for _, c := range []struct {
		name  string
		ms    []Mutex
		again func(acquisitions int) int
	}{
		{"two clients taking turns", turns, func(int) int { return int(takenBack.Load()) }},
		{"one client", []Mutex{alone}, func(n int) int { return n - 1 }},
	} {
		// A run of 20 ms may end before a client scheduled late has
		// taken the key at all: such a run, with fewer than 2
		// acquisitions, tells nothing and runs again. A miscount shows in
		// every run.
		const attempts = 5
		for attempt := 1; ; attempt++ {
			var tl tally
			r := testing.Benchmark(func(b *testing.B) {
				tl = tally{}
				resetTurns()
				run(b, Impl{Name: "test"}, c.ms, 20*time.Millisecond, true, ctxKinds[0], &tl)
			})
			if r.N == 0 {
				t.Fatalf("%s: the run failed", c.name)
			}
			res := tl.result()
			if res.Acquisitions < 2 && attempt < attempts {
				t.Logf("%s: run %d made %d acquisitions, too few to tell; again", c.name, attempt, res.Acquisitions)
				continue
			}
			if res.Acquisitions < 2 || res.Again != c.again(res.Acquisitions) {
				t.Errorf("%s: %d of %d acquisitions counted again, want %d", c.name, res.Again, res.Acquisitions, c.again(res.Acquisitions))
			}
			break
		}
	}
}
