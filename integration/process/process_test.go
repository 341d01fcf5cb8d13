// Package process_test checks, on every backend reachable from another
// process, what only a real process death shows: a MinHold outlives its
// SIGKILLed holder, and an election survives the SIGKILL of its leader
// with exactly one new leader and never two at once. The children are this
// test binary, started again with LOCKER_CHILD set.
package process_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/golocker/locker"
	"github.com/golocker/locker/backends"
	"github.com/golocker/locker/integration/internal/storeurl"
	"github.com/golocker/locker/internal/testenv"
)

const (
	ttl     = 2 * time.Second
	minHold = 2 * time.Second
	every   = 50 * time.Millisecond // between the parent's TryLocks
)

func TestMain(m *testing.M) {
	if mode := os.Getenv("LOCKER_CHILD"); mode != "" {
		os.Exit(child(mode, os.Getenv("LOCKER_CHILD_URL"), os.Getenv("LOCKER_CHILD_KEY")))
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

// child runs one mode and reports on stdout, one event a line:
//
//	minhold: "before <unixnano>", "unlocked <token> <unixnano>", then waits to be killed
//	elect:   "lead <token> <unixnano>" and "end <token> <unixnano>" per term, until killed
func child(mode, url, key string) int {
	ctx := context.Background()
	l, err := open(ctx, url, fmt.Sprintf("child-%d", os.Getpid()))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	say := func(event string, token uint64) {
		fmt.Printf("%s %d %d\n", event, token, time.Now().UnixNano())
	}
	switch mode {
	case "minhold":
		say("before", 0)
		lk, err := l.TryLock(ctx, key, locker.MinHold(minHold))
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		if err := lk.Unlock(ctx); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		say("unlocked", lk.Token())
	case "elect":
		err := locker.Elect(ctx, l, key, func(ctx context.Context) error {
			lk, err := l.TryLock(ctx, key) // reentrant: this term's lock
			if err != nil {
				return err
			}
			say("lead", lk.Token())
			<-ctx.Done()
			say("end", lk.Token())
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

// event is one line of a child.
type event struct {
	child int
	what  string
	token uint64
	at    time.Time
}

// proc is a running child.
type proc struct {
	cmd    *exec.Cmd
	stderr strings.Builder
}

// start starts child i in mode on url and key; its events go to events.
func start(t *testing.T, i int, mode, url, key string, events chan<- event) *proc {
	t.Helper()
	p := &proc{cmd: exec.Command(os.Args[0], "-test.run=^$")}
	p.cmd.Env = append(os.Environ(), "LOCKER_CHILD="+mode, "LOCKER_CHILD_URL="+url, "LOCKER_CHILD_KEY="+key)
	p.cmd.Stderr = &p.stderr
	out, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Go(func() { readEvents(t, i, out, events) })
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		_ = p.cmd.Wait()
		wg.Wait()
	})
	return p
}

func readEvents(t *testing.T, i int, out io.Reader, events chan<- event) {
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 3 {
			t.Errorf("child %d: unexpected line %q", i, sc.Text())
			continue
		}
		tok, err1 := strconv.ParseUint(f[1], 10, 64)
		ns, err2 := strconv.ParseInt(f[2], 10, 64)
		if err := errors.Join(err1, err2); err != nil {
			t.Errorf("child %d: line %q: %v", i, sc.Text(), err)
			continue
		}
		events <- event{child: i, what: f[0], token: tok, at: time.Unix(0, ns)}
	}
}

// next returns the next event, failing the test after wait.
func next(t *testing.T, events <-chan event, wait time.Duration, procs ...*proc) event {
	t.Helper()
	select {
	case e := <-events:
		return e
	case <-time.After(wait):
		var errs []string
		for i, p := range procs {
			errs = append(errs, fmt.Sprintf("child %d stderr: %q", i, p.stderr.String()))
		}
		t.Fatalf("no event from the children within %v; %s", wait, strings.Join(errs, "; "))
		return event{}
	}
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
			events := make(chan event, 16)
			p := start(t, 0, "minhold", url, key, events)
			before := next(t, events, 30*time.Second, p)
			unlocked := next(t, events, 30*time.Second, p)
			if before.what != "before" || unlocked.what != "unlocked" {
				t.Fatalf("child events %v, %v", before, unlocked)
			}
			if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			_ = p.cmd.Wait()
			killed := time.Now()
			until := before.at.Add(minHold) // the acquisition came after before
			for time.Now().Before(until) {
				lk, err := other.TryLock(ctx, key)
				if err == nil {
					answered := time.Now()
					_ = lk.Unlock(ctx)
					if answered.Before(until) {
						t.Fatalf("another Locker took the key %v after its holder's acquisition (MinHold %v), %v after the holder was killed", answered.Sub(before.at).Round(time.Millisecond), minHold, answered.Sub(killed).Round(time.Millisecond))
					}
					break
				}
				if !errors.Is(err, locker.ErrNotAcquired) {
					t.Fatalf("TryLock: %v", err)
				}
				time.Sleep(every)
			}
			free := unlocked.at.Add(minHold + ttl + 5*time.Second)
			for {
				lk, err := other.TryLock(ctx, key)
				if err == nil {
					t.Logf("%s: free %v after the acquisition (MinHold %v, TTL %v), %v after SIGKILL; token %d after %d", b.Name, time.Since(before.at).Round(time.Millisecond), minHold, ttl, time.Since(killed).Round(time.Millisecond), lk.Token(), unlocked.token)
					if lk.Token() <= unlocked.token {
						t.Errorf("fencing token %d after the killed holder's %d: tokens must only go up", lk.Token(), unlocked.token)
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
func TestElectionSurvivesSIGKILL(t *testing.T) {
	for _, b := range storeurl.Backends {
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			url := b.URL(t)
			key := fmt.Sprintf("elect-%d", time.Now().UnixNano())
			events := make(chan event, 64)
			var procs []*proc
			for i := range 3 {
				procs = append(procs, start(t, i, "elect", url, key, events))
			}
			first := next(t, events, 30*time.Second, procs...)
			if first.what != "lead" {
				t.Fatalf("first event %+v, want a lead", first)
			}
			// Nobody else leads while the first leader lives.
			select {
			case e := <-events:
				t.Fatalf("%+v while child %d leads with token %d", e, first.child, first.token)
			case <-time.After(ttl):
			}
			if err := procs[first.child].cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			killed := time.Now()
			second := next(t, events, ttl+10*time.Second, procs...)
			if second.what != "lead" || second.child == first.child {
				t.Fatalf("after child %d was killed: %+v, want another child leading", first.child, second)
			}
			if second.token <= first.token {
				t.Errorf("new leader's token %d after %d: tokens must only go up", second.token, first.token)
			}
			t.Logf("%s: child %d leads %v after the leader's SIGKILL (TTL %v), token %d after %d", b.Name, second.child, second.at.Sub(killed).Round(time.Millisecond), ttl, second.token, first.token)
			// Exactly one new leader: the third child stays a follower.
			select {
			case e := <-events:
				t.Fatalf("%+v while child %d leads with token %d", e, second.child, second.token)
			case <-time.After(ttl):
			}
		})
	}
}
