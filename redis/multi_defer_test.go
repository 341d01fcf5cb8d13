package redis

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/golocker/locker"
)

// TestUnfairReleaseMultiDefersWakeUp checks that an unfair Locker's
// release of keys a LockMulti waits for wakes nobody when the Locker
// takes the keys again (multi_defer.go): the release runs no PUBLISH (5
// commands, MONITOR), and the wait's record stays. Closing the Locker then
// wakes the wait after the next release, long before it would try again
// by itself (TTL/3).
func TestUnfairReleaseMultiDefersWakeUp(t *testing.T) {
	s := startDeferred(t, time.Hour) // only its own LockMulti or Close ends it
	s.hd.defers.bound = time.Hour    // the streak does not end either
	loadScripts(s.ctx, t, s.c, s.hd.multiRelease, s.hd.multiAcquire)
	m := startMonitor(t, s.addr)
	if err := s.hm.Unlock(s.ctx); err != nil {
		t.Fatal(err)
	}
	hm, err := locker.TryLockMulti(s.ctx, s.holder, s.keys)
	if err != nil {
		t.Fatalf("the releasing Locker could not take its keys again: %v", err)
	}
	s.c.Ping(s.ctx) // ends the last script's lines in MONITOR
	// A wake-up would run HGETALL, HDEL and PUBLISH in the release.
	m.expect(s.ctx, t, s.base, []costStep{
		{"releasing three awaited keys, the wake-up deferred", 5},
		{"taking them again", 10},
	})
	awaitRecorded(s.ctx, t, s.c, s.keys[0], s.wd.lid) // its record is still there
	if err := hm.Unlock(s.ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.holder.Close(); err != nil {
		t.Fatal(err)
	}
	s.awaitWait(t, "closing the Locker that deferred a wake-up did not wake the wait")
}

// TestUnfairDeferredWakeUpNotRetaken checks that the wake-up an unfair
// Locker's release deferred comes when the Locker does not lock the keys
// again (deferGrace after the release), long before the wait would try
// again by itself (TTL/3).
func TestUnfairDeferredWakeUpNotRetaken(t *testing.T) {
	s := startDeferred(t, 0)
	if err := s.hm.Unlock(s.ctx); err != nil {
		t.Fatal(err)
	}
	s.awaitWait(t, "the deferred wake-up did not come")
}

// TestUnfairDeferredWakeUpAfterARetakenOne checks that a deferred wake-up
// still comes when the one deferred before it was retaken: the Locker's one
// timer (multi_defer.go), stopped when the retake left nothing owed, is
// armed again for the next one. The wait would try again by itself only
// after TTL/3.
func TestUnfairDeferredWakeUpAfterARetakenOne(t *testing.T) {
	const grace = 200 * time.Millisecond
	s := startDeferred(t, grace)
	s.hd.defers.bound = time.Hour // the streak does not end
	if err := s.hm.Unlock(s.ctx); err != nil {
		t.Fatal(err)
	}
	hm, err := locker.TryLockMulti(s.ctx, s.holder, s.keys)
	if err != nil {
		// The first wake-up came before the retake (a stalled test
		// process): the wait took the keys.
		s.awaitWait(t, "the wait woken by the first deferred release did not return")
		return
	}
	time.Sleep(grace / 2) // the second deferral falls due after the first
	if err := hm.Unlock(s.ctx); err != nil {
		t.Fatal(err)
	}
	s.awaitWait(t, "the wake-up deferred after a retaken one did not come")
}

// TestUnfairDeferredStreakEnds checks that an unfair Locker that keeps
// releasing and taking keys a LockMulti waits for wakes the wait once its
// streak of deferred releases is deferBound old: the wait gets the keys,
// long before it would try again by itself (TTL/3).
func TestUnfairDeferredStreakEnds(t *testing.T) {
	s := startDeferred(t, time.Hour) // only its own LockMulti or the bound ends it
	hm := s.hm
	// The wait would try by itself after 50 s at the earliest.
	for end := time.Now().Add(30 * time.Second); ; {
		if time.Now().After(end) {
			t.Fatal("a streak of deferred releases kept the keys from the wait for 30 s")
		}
		if err := hm.Unlock(s.ctx); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-s.got:
			if err != nil {
				t.Fatal(err)
			}
			return
		default:
		}
		var err error
		if hm, err = locker.TryLockMulti(s.ctx, s.holder, s.keys); err != nil {
			s.awaitWait(t, "the wait that took the keys did not return") // it took them
			return
		}
	}
}

// TestUnfairDeferredWakeUpAtClose checks that closing an unfair Locker
// while the timer of a deferred wake-up runs it does not leave that
// wake-up to a client the Locker's Close then closes (a Locker from Open):
// Close cancels it and wakes the wait itself before the client goes. Here
// the timer's call hangs until its ctx ends, and the holder's client is
// closed after Close (WithOnClose): without that, the wait is woken by
// nobody, and would try again only after its refresh (TTL/3, 100 s).
func TestUnfairDeferredWakeUpAtClose(t *testing.T) {
	gate := &hangHook{entered: make(chan struct{})}
	s := startDeferredOn(t, time.Millisecond, func(hc *goredis.Client) locker.Option {
		hc.AddHook(gate)
		return locker.WithOnClose(hc.Close)
	})
	s.hd.defers.bound = time.Hour // the streak does not end
	gate.script = s.hd.multiGiveUp.Hash()
	if err := s.hm.Unlock(s.ctx); err != nil {
		t.Fatal(err)
	}
	<-gate.entered // the timer's wake-up is on its way, and hangs
	if err := s.holder.Close(); err != nil {
		t.Fatal(err)
	}
	s.awaitWait(t, "the wake-up a deferred release owed was lost when the Locker closed")
}

// hangHook makes the first pipeline that runs script (its SHA-1) hang
// until its ctx ends, after closing entered; the others pass.
type hangHook struct {
	script  string
	entered chan struct{}
	once    sync.Once
}

func (h *hangHook) DialHook(next goredis.DialHook) goredis.DialHook { return next }

func (h *hangHook) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook { return next }

func (h *hangHook) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		for _, c := range cmds {
			if args := c.Args(); len(args) > 1 && args[1] == h.script {
				hang := false
				h.once.Do(func() { hang = true })
				if hang {
					close(h.entered)
					<-ctx.Done()
					for _, c := range cmds {
						c.SetErr(ctx.Err())
					}
					return ctx.Err()
				}
			}
		}
		return next(ctx, cmds)
	}
}

// deferredSetup is a test of deferred wake-ups: an unfair holder holds
// three keys (hm), and an unfair waiter's LockMulti of them is recorded
// with the first; it unlocks as soon as it gets them and sends its result
// on got.
type deferredSetup struct {
	ctx        context.Context
	addr, base string
	c          *goredis.Client
	keys       []string
	holder     locker.Locker
	hd, wd     *redisDriver
	hm         *locker.MultiLock
	got        chan error
}

// startDeferred starts a deferredSetup whose holder waits grace (0:
// deferGrace) before it wakes what its releases deferred.
func startDeferred(t *testing.T, grace time.Duration) *deferredSetup {
	return startDeferredOn(t, grace, func(c *goredis.Client) locker.Option { return nil })
}

// startDeferredOn is startDeferred with the holder's client passed to
// hook first, and the option hook returns (nil: none) added to the
// holder's.
func startDeferredOn(t *testing.T, grace time.Duration, hook func(*goredis.Client) locker.Option) *deferredSetup {
	ctx, addr, c, base, keys := multiWaitSetup(t)
	s := &deferredSetup{ctx: ctx, addr: addr, base: base, c: c, keys: keys, got: make(chan error, 1)}
	hc := newClient(t, addr)
	opts := multiWaitOptions
	if opt := hook(hc); opt != nil {
		opts = append(slices.Clip(opts), opt)
	}
	s.holder, s.hd = newTestLocker(t, hc, opts...)
	s.hd.unfairArg = "1"
	s.hd.defers.grace = grace
	waiter, wd := newTestLocker(t, newClient(t, addr), multiWaitOptions...)
	wd.unfairArg = "1"
	s.wd = wd
	var err error
	if s.hm, err = locker.LockMulti(ctx, s.holder, keys); err != nil {
		t.Fatal(err)
	}
	go func() {
		m, err := locker.LockMulti(ctx, waiter, keys)
		if err == nil {
			err = m.Unlock(context.WithoutCancel(ctx))
		}
		s.got <- err
	}()
	awaitRecorded(ctx, t, c, keys[0], wd.lid)
	return s
}

// awaitWait fails t with msg unless the waiter got the keys within 30 s.
func (s *deferredSetup) awaitWait(t *testing.T, msg string) {
	t.Helper()
	select {
	case err := <-s.got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal(msg)
	}
}
