// Package process_test checks, on every backend reachable from another
// process, what only a real process death shows: a MinHold outlives its
// SIGKILLed holder, and an election survives the SIGKILL of its leader
// with exactly one new leader and never two at once. The children are this
// test binary, started again with LOCKER_CHILD set.
package process_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/golocker/locker"
	"github.com/golocker/locker/backends"
	"github.com/golocker/locker/integration/internal/child"
	"github.com/golocker/locker/integration/internal/storeurl"
	"github.com/golocker/locker/internal/rerun"
	"github.com/golocker/locker/internal/testenv"
)

const (
	ttl     = 2 * time.Second
	minHold = 2 * time.Second
	every   = 50 * time.Millisecond // between the parent's TryLocks
)

func TestMain(m *testing.M) {
	if mode := child.Mode(); mode != "" {
		os.Exit(runChild(mode, os.Getenv("LOCKER_CHILD_URL"), os.Getenv("LOCKER_CHILD_KEY")))
	}
	testenv.MainWith(m, storeurl.Stop)
}

// open opens a Locker on url with the tests' TTL.
func open(ctx context.Context, url, label string) (locker.Locker, error) {
	var mux locker.Mux
	if err := backends.Register(&mux); err != nil {
		return nil, err
	}
	return locker.Open(ctx, &mux, url, locker.WithTTL(ttl), locker.WithOwnerLabel(label), locker.WithPrefix("process/"))
}

// runChild runs one mode and reports on stdout, one event a line:
//
//	minhold: "before <unixnano>", "unlocked <token> <unixnano>", then waits to be killed
//	elect:   "lead <token> <unixnano>" per term, then "end <token> <unixnano>", or
//	         "starved <token> <deadline unixnano>" for a term lost at its local
//	         deadline (its renewals starved), until killed
func runChild(mode, url, key string) int {
	ctx := context.Background()
	l, err := open(ctx, url, fmt.Sprintf("child-%d", os.Getpid()))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	switch mode {
	case "minhold":
		child.Say("before", 0)
		lk, err := l.TryLock(ctx, key, locker.MinHold(minHold))
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		if err := lk.Unlock(ctx); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		child.Say("unlocked", lk.Token())
	case "elect":
		err := locker.Elect(ctx, l, key, func(ctx context.Context) error {
			lk, err := l.TryLock(ctx, key) // reentrant: this term's lock
			if err != nil {
				return err
			}
			child.Say("lead", lk.Token())
			<-ctx.Done()
			if errors.Is(context.Cause(ctx), locker.ErrNoRenewal) {
				// Lost at its local deadline: the term ended then.
				child.SayAt("starved", lk.Token(), lk.Deadline())
				return nil
			}
			child.Say("end", lk.Token())
			return nil
		})
		fmt.Fprintln(os.Stderr, err)
		return 1
	default:
		fmt.Fprintln(os.Stderr, "unknown mode", mode)
		return 2
	}
	select {} // until killed
}

// childEnv is the environment of a child on url and key.
func childEnv(url, key string) []string {
	return []string{"LOCKER_CHILD_URL=" + url, "LOCKER_CHILD_KEY=" + key}
}

// TestMinHoldOutlivesTheProcess: a child takes a key with MinHold(2s),
// unlocks at once and is SIGKILLed; another Locker's TryLock fails until
// 2 s after the acquisition and then succeeds (within the MinHold plus a
// TTL: ZooKeeper's hold ends with the dead holder's session).
func TestMinHoldOutlivesTheProcess(t *testing.T) {
	for _, b := range storeurl.Backends {
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			url := b.URL(t)
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			other, err := open(ctx, url, "parent")
			if err != nil {
				t.Fatal(err)
			}
			defer other.Close()
			key := fmt.Sprintf("minhold-%d", time.Now().UnixNano())
			events := make(chan child.Event, 16)
			p := child.Start(t, 0, "minhold", childEnv(url, key), events)
			before := child.Next(t, events, 30*time.Second, p)
			unlocked := child.Next(t, events, 30*time.Second, p)
			if before.What != "before" || unlocked.What != "unlocked" {
				t.Fatalf("child events %v, %v", before, unlocked)
			}
			if err := p.Cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			_ = p.Cmd.Wait()
			killed := time.Now()
			until := before.At.Add(minHold) // the acquisition came after before
			for time.Now().Before(until) {
				lk, err := other.TryLock(ctx, key)
				if err == nil {
					answered := time.Now()
					_ = lk.Unlock(ctx)
					if answered.Before(until) {
						t.Fatalf("another Locker took the key %v after its holder's acquisition (MinHold %v), %v after the holder was killed", answered.Sub(before.At).Round(time.Millisecond), minHold, answered.Sub(killed).Round(time.Millisecond))
					}
					break
				}
				if !errors.Is(err, locker.ErrNotAcquired) {
					t.Fatalf("TryLock: %v", err)
				}
				time.Sleep(every)
			}
			free := unlocked.At.Add(minHold + ttl + 5*time.Second)
			for {
				lk, err := other.TryLock(ctx, key)
				if err == nil {
					t.Logf("%s: free %v after the acquisition (MinHold %v, TTL %v), %v after SIGKILL; token %d after %d", b.Name, time.Since(before.At).Round(time.Millisecond), minHold, ttl, time.Since(killed).Round(time.Millisecond), lk.Token(), unlocked.N)
					if lk.Token() <= unlocked.N {
						t.Errorf("fencing token %d after the killed holder's %d: tokens must only go up", lk.Token(), unlocked.N)
					}
					_ = lk.Unlock(ctx)
					return
				}
				if !errors.Is(err, locker.ErrNotAcquired) {
					t.Fatalf("TryLock: %v", err)
				}
				if time.Now().After(free) {
					t.Fatalf("the key is still held %v after its MinHold ended and the holder was killed", time.Since(until).Round(time.Millisecond))
				}
				time.Sleep(every)
			}
		})
	}
}

// TestElectionSurvivesSIGKILL: three child replicas elect on one key; the
// leader is SIGKILLed; exactly one new leader follows within a TTL and
// slack, with a higher token, and no two terms ever overlap: a term ends
// (its ctx, by its lock's Done) before the next one begins.
//
// A leader whose renewals starved on a loaded machine loses its term at
// its local deadline, as the contract allows, and says so: the scenario
// then says nothing of the election, and runs again, up to electAttempts
// times in all, on a fresh key and fresh children. A term that begins
// before another ended fails at once.
func TestElectionSurvivesSIGKILL(t *testing.T) {
	for _, b := range storeurl.Backends {
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			url := b.URL(t)
			rerun.Starved(t, electAttempts, func(int) error { return electOnce(t, b.Name, url) })
		})
	}
}

// electAttempts is how many times TestElectionSurvivesSIGKILL runs its
// scenario at most, while a leader's renewals starve.
const electAttempts = 3

// electOnce runs the scenario of TestElectionSurvivesSIGKILL once, on a
// fresh key with three fresh children, which it kills when it returns. It
// fails t on a fault of the election, and returns why the scenario says
// nothing (a leader whose renewals starved), or nil when it passed.
func electOnce(t *testing.T, name, url string) (starved error) {
	t.Helper()
	key := fmt.Sprintf("elect-%d", time.Now().UnixNano())
	events := make(chan child.Event, 64)
	var procs []*child.Proc
	for i := range 3 {
		procs = append(procs, child.Start(t, i, "elect", childEnv(url, key), events))
	}
	defer func() {
		for _, p := range procs {
			_ = p.Cmd.Process.Kill()
		}
	}()
	first := child.Next(t, events, 30*time.Second, procs...)
	if first.What != "lead" {
		t.Fatalf("first event %+v, want a lead", first)
	}
	// Nobody else leads while the first leader lives.
	if starved := soleLeader(t, events, first, procs); starved != nil {
		return starved
	}
	if err := procs[first.Child].Cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	second := child.Next(t, events, ttl+10*time.Second, procs...)
	if second.What != "lead" || second.Child == first.Child {
		t.Fatalf("after child %d was killed: %+v, want another child leading", first.Child, second)
	}
	if second.N <= first.N {
		t.Errorf("new leader's token %d after %d: tokens must only go up", second.N, first.N)
	}
	t.Logf("%s: child %d leads %v after the leader's SIGKILL (TTL %v), token %d after %d", name, second.Child, second.At.Sub(killed).Round(time.Millisecond), ttl, second.N, first.N)
	// Exactly one new leader: the third child stays a follower.
	return soleLeader(t, events, second, procs)
}

// soleLeader watches the events for a TTL while leader leads, and fails t
// on any, but for one: the leader's term lost at its local deadline
// ("starved"), which it returns described. Another child's lead before
// the leader's report comes waits for that report: a lead that began
// before the leader's term ended is two leaders at once.
func soleLeader(t *testing.T, events <-chan child.Event, leader child.Event, procs []*child.Proc) (starved error) {
	t.Helper()
	window := time.NewTimer(ttl)
	defer window.Stop()
	var next *child.Event // another child's lead before the leader's report
	for {
		select {
		case e := <-events:
			switch {
			case e.Child == leader.Child && e.What == "starved" && e.N == leader.N:
				if next != nil && next.At.Before(e.At) {
					t.Fatalf("child %d leads with token %d from %v, before child %d's term (token %d) ended at its deadline %v: two leaders at once", next.Child, next.N, next.At.Format(time.StampMicro), leader.Child, leader.N, e.At.Format(time.StampMicro))
				}
				return fmt.Errorf("child %d's term (token %d) ended at its local deadline, its renewals starved (the process's load)", leader.Child, leader.N)
			case e.Child != leader.Child && e.What == "lead" && next == nil:
				// Either two leaders, or the leader's loss not reported
				// yet: wait for its report.
				next = &e
				window.Reset(ttl + 10*time.Second)
			default:
				t.Fatalf("%+v while child %d leads with token %d", e, leader.Child, leader.N)
			}
		case <-window.C:
			if next != nil {
				t.Fatalf("child %d leads with token %d while child %d, which leads with token %d, did not report its term's end within %v: two leaders at once", next.Child, next.N, leader.Child, leader.N, ttl+10*time.Second)
			}
			return nil
		}
	}
}
