package redis

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/golocker/locker"
)

// TestUnfairStarvingWaiterScripts: an unfair release hands the key over to
// a first waiter queued for starveAfter or longer that is not awake, as a
// fair release does: into its Locker's inbox when its record says that
// Locker reads it ("i<n>"), else with a "grant" on its channel. Nobody can
// take the key before it then. A first waiter that is awake (a release
// woke it, or it polls: the " woke" field names it) has the key freed, and
// so has one queued for less than starveAfter (TestUnfairScripts).
func TestUnfairStarvingWaiterScripts(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, seq string
		awake     bool
	}{{"inbox", "i1", false}, {"channel", "1", false}, {"awake", "i1", true}} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			lb := "L" + uniqueKey(t) // an inbox of its own
			r := newScriptRunner(t, map[string]string{"B": lb}, true)
			ctx, rc, key := r.ctx, r.c, r.key
			inbox := inboxName(lb)
			t.Cleanup(func() { rc.Del(context.Background(), inbox) })
			subs := lockerChannels(t, ctx, rc, key, lb)
			tokA := r.acquire("A", "0")
			if tokA <= 0 {
				t.Fatal("A could not take the free key")
			}
			if r.acquire("B", c.seq) >= 0 {
				t.Fatal("B was not queued behind A")
			}
			r.arrive(-time.Hour) // B has waited long, whatever the calls took
			if c.awake {
				now, err := rc.Time(ctx).Result()
				if err != nil {
					t.Fatal(err)
				}
				rc.HSet(ctx, name(kindWaiters, key), " woke", fmt.Sprintf("%d B", now.Add(time.Hour).UnixMicro()))
			}
			if n := r.release("A", "0"); n != 1 {
				t.Fatalf("A's release = %d; want 1", n)
			}
			if c.awake {
				if r.holder() != "" {
					t.Fatalf("the release left the key to %q; want it free for an awake waiter, who tries again by itself", r.holder())
				}
				expectMessages(t, ctx, subs, map[string]string{lb: ""})
				return
			}
			if r.holder() != "B" || len(r.queued()) != 0 {
				t.Fatalf("after the release: holder %q, queue %v; want the key handed over to B, who waited longest", r.holder(), r.queued())
			}
			if pttl := rc.PTTL(ctx, name(kindWaiters, key)).Val(); pttl == -1 {
				t.Errorf("after the hand-over to the last waiter, its waiters hash has no expiry (%v): a residue", rc.HGetAll(ctx, name(kindWaiters, key)).Val())
			}
			if tok := r.acquire("C", "1"); tok > 0 {
				t.Fatalf("C's attempt took the key handed over to B (token %d)", tok)
			}
			if tok := r.acquire("X", "0"); tok > 0 {
				t.Fatalf("X's single attempt took the key handed over to B (token %d)", tok)
			}
			entries := rc.LRange(ctx, inbox, 0, -1).Val()
			if c.seq == "i1" {
				if len(entries) != 1 || !strings.HasPrefix(entries[0], "B 1 ") {
					t.Errorf("B's inbox = %q; want one grant to B for its attempt 1", entries)
				}
				expectMessages(t, ctx, subs, map[string]string{lb: ""})
			} else {
				if len(entries) != 0 {
					t.Errorf("B's inbox = %q; want nothing: B's record does not say it reads it", entries)
				}
				expectMessages(t, ctx, subs, map[string]string{lb: "grant B 1 "})
			}
			if tok := r.acquire("B", "k2"); tok <= tokA {
				t.Errorf("B's confirming attempt = %d; want its token, above A's %d", tok, tokA)
			}
		})
	}
}

// TestUnfairStarvingGap: after an unfair release handed the key over to a
// starving first waiter, the releases within starve_gap_us (release.lua)
// barge and wake the next waiter as before, though it has waited as long;
// the first release after the gap hands the key over to it. Without the
// gap a hot key with many waiters, all queued long, changes hands at every
// release, as in fair mode.
func TestUnfairStarvingGap(t *testing.T) {
	t.Parallel()
	lc := "L" + uniqueKey(t)
	r := newScriptRunner(t, map[string]string{"B": "LB", "C": lc}, true)
	ctx, rc, key := r.ctx, r.c, r.key
	subs := lockerChannels(t, ctx, rc, key, lc)
	wk := name(kindWaiters, key)
	if r.acquire("A", "0") <= 0 {
		t.Fatal("A could not take the free key")
	}
	if r.acquire("B", "1") >= 0 || r.acquire("C", "1") >= 0 {
		t.Fatal("B and C were not queued behind A")
	}
	r.arrive(-time.Hour)
	if r.release("A", "0") != 1 || r.holder() != "B" {
		t.Fatalf("A's release left the key to %q; want it handed over to B, the first waiter, starving", r.holder())
	}
	expectMessages(t, ctx, subs, map[string]string{lc: "claim "}) // C is next in line
	if r.acquire("B", "k2") <= 0 {
		t.Fatal("B could not confirm the key handed over to it")
	}
	now, err := rc.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	// Within the gap, whatever the time the calls took.
	rc.HSet(ctx, wk, " starved", now.Add(time.Hour).UnixMicro())
	if r.release("B", "0") != 1 || r.holder() != "" {
		t.Fatalf("B's release within the gap left the key to %q; want it free", r.holder())
	}
	expectMessages(t, ctx, subs, map[string]string{lc: "free"})
	if r.acquire("B", "1") <= 0 {
		t.Fatal("B could not take the free key again")
	}
	rc.HSet(ctx, wk, " starved", "1") // the gap is over
	rc.HSet(ctx, wk, " woke", "1 C")  // and C's wake-up long ago
	if r.release("B", "0") != 1 || r.holder() != "C" {
		t.Fatalf("B's release after the gap left the key to %q; want it handed over to C, starving", r.holder())
	}
}

// TestUnfairWaiterNotOvertakenOnceStarving: a Lock of an unfair Locker that
// has waited longer than starveAfter, not polling, gets the key from the
// holder's Unlock: another Locker asking right after the Unlock finds it
// held. Barging lets such a waiter be overtaken without bound: the
// releasing Locker, or any other, asks first. Both of the waiter's ways:
// polling without pub/sub (the hand-over is found by its next attempt),
// and a subscribed Locker's inbox (its Lock registers for it when the
// key's channel is subscribed from an earlier wait, as on a contended key:
// its first attempt then records that it reads it, and it makes no other
// attempt while the key stays held, so it is never awake).
func TestUnfairWaiterNotOvertakenOnceStarving(t *testing.T) {
	t.Parallel()
	for _, noPubSub := range []bool{true, false} {
		t.Run(fmt.Sprintf("NoPubSub=%v", noPubSub), func(t *testing.T) {
			t.Parallel()
			addr, admin, ctx, key := keyOnServer(t)
			a, c := newUnfairLocker(t, addr), newUnfairLocker(t, addr)
			d := newDriver(newClient(t, addr))
			d.unfairArg = "1"
			d.poll.Store(noPubSub)
			b, err := locker.New(d, locker.WithTTL(time.Minute))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = b.Close() })
			for round := range 4 {
				la, err := a.Lock(ctx, key)
				if err != nil {
					t.Fatal(err)
				}
				got := lockAsync(ctx, b, key)
				// B unlocks once C has asked.
				unlockB := func() {
					t.Helper()
					r := <-got
					if r.err != nil {
						t.Fatalf("round %d: B: %v", round, r.err)
					}
					if err := r.lk.Unlock(ctx); err != nil {
						t.Fatalf("round %d: B's Unlock: %v", round, err)
					}
				}
				waitQueued(t, ctx, admin, key, 1)
				if !noPubSub && round > 0 && !d.notify.subscribedOrClosed(key) {
					t.Logf("round %d: B's channel was not subscribed any more when its Lock began", round)
				}
				// B waits longer than the bound, and the last hand-over
				// to a starving waiter (the round before) is older than
				// the gap.
				time.Sleep(starveGap + 2*starveAfter)
				if err := la.Unlock(ctx); err != nil {
					t.Fatal(err)
				}
				lc, err := c.TryLock(ctx, key)
				if err == nil {
					_ = lc.Unlock(ctx)
					// The first round of the subscribed Locker
					// subscribes while waiting: its settling attempts
					// may poll at the release.
					if !noPubSub && round == 0 {
						unlockB()
						continue
					}
					t.Fatalf("round %d: a Locker asking right after the Unlock got the key that B had waited for, longer than %v", round, starveAfter)
				}
				if !errors.Is(err, locker.ErrNotAcquired) {
					t.Fatal(err)
				}
				unlockB()
			}
		})
	}
}
