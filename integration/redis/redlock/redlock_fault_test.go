package redlock_test

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/golocker/locker"
	"github.com/golocker/locker/internal/testenv"
	"github.com/golocker/locker/redis"
)

// newRedlock returns a Redlock Locker on masters whose connection to each
// master goes through a proxy of its own (returned in master order), closed
// when the test ends.
func newRedlock(t *testing.T, masters []*testenv.RedisServer, ttl time.Duration) (locker.Locker, []*testenv.Proxy) {
	t.Helper()
	testenv.AwaitRedisUptime(t, masters, ttl)
	cs := make([]redis.Master, len(masters))
	ps := make([]*testenv.Proxy, len(masters))
	for i, m := range masters {
		ps[i] = testenv.NewProxy(t, m.Addr())
		// As RedlockConfig.Timeout advises: no retries in the client.
		o := clientOptions(ps[i].Addr())
		o.MaxRetries, o.DialerRetries = -1, 1
		c := goredis.NewClient(o)
		t.Cleanup(func() { _ = c.Close() })
		cs[i] = c
	}
	l, err := redis.NewRedlock(cs, locker.WithTTL(ttl), locker.WithBackoff(locker.ExponentialBackoff(5*time.Millisecond, 50*time.Millisecond)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l, ps
}

// holders checks, for a contended run, that no lock is granted while the
// previous holder's Done is still open and that tokens increase in grant
// order.
type holders struct {
	mu       sync.Mutex
	current  locker.Lock
	last     uint64
	grants   int
	overlaps int
	bad      []string
}

// acquired records lk as the holder.
func (h *holders) acquired(lk locker.Lock) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.grants++
	if h.current != nil {
		select {
		case <-h.current.Done():
		default:
			h.overlaps++
			h.bad = append(h.bad, "token "+strconv.FormatUint(lk.Token(), 10)+" granted while token "+
				strconv.FormatUint(h.current.Token(), 10)+" was still held")
		}
	}
	if lk.Token() <= h.last {
		h.bad = append(h.bad, "token "+strconv.FormatUint(lk.Token(), 10)+" not above the previous "+strconv.FormatUint(h.last, 10))
	}
	h.last = max(h.last, lk.Token())
	h.current = lk
}

// released ends lk's turn, before its Unlock.
func (h *holders) released(lk locker.Lock) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.current == lk {
		h.current = nil
	}
}

// contend runs workers on ls, each locking key, holding it briefly and
// unlocking, until ctx ends.
func contend(ctx context.Context, t *testing.T, ls []locker.Locker, key string, h *holders) *sync.WaitGroup {
	var wg sync.WaitGroup
	for i, l := range ls {
		for w := range 2 {
			wg.Go(func() {
				for ctx.Err() == nil {
					lk, err := l.Lock(ctx, key)
					if err != nil {
						if ctx.Err() == nil && !errors.Is(err, locker.ErrNotAcquired) {
							t.Logf("locker %d worker %d: Lock: %v", i, w, err)
						}
						continue
					}
					h.acquired(lk)
					time.Sleep(2 * time.Millisecond)
					h.released(lk)
					_ = lk.Unlock(context.WithoutCancel(ctx))
				}
			})
		}
	}
	return &wg
}

// TestRedlockKillMaster kills one of three masters with SIGKILL during a
// contended run, keeps it down for longer than a TTL (Redlock's delayed
// restart), and starts it again with an empty dataset: no lock is ever
// granted while another holder's Done is open, and tokens increase in grant
// order throughout.
func TestRedlockKillMaster(t *testing.T) {
	t.Parallel()
	const ttl = time.Second
	masters := testenv.NewRedisMasters(t, 3)
	var ls []locker.Locker
	for range 3 {
		l, _ := newRedlock(t, masters, ttl)
		ls = append(ls, l)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var h holders
	wg := contend(ctx, t, ls, "kill", &h)

	phase := func(name string, d time.Duration) {
		h.mu.Lock()
		before := h.grants
		h.mu.Unlock()
		time.Sleep(d)
		h.mu.Lock()
		t.Logf("%s: %d grants in %v", name, h.grants-before, d)
		h.mu.Unlock()
	}
	phase("3 masters", time.Second)
	masters[0].Kill(t)
	phase("master 0 killed", 2*ttl)
	masters[0].Start(t)
	phase("master 0 back, empty", time.Second)
	masters[2].Kill(t)
	phase("master 2 killed", time.Second)
	cancel()
	wg.Wait()

	h.mu.Lock()
	defer h.mu.Unlock()
	if h.overlaps > 0 || len(h.bad) > 0 {
		t.Errorf("a key must never be granted to two holders at once, and tokens must increase: %d overlaps in %d grants; %v", h.overlaps, h.grants, h.bad[:min(len(h.bad), 5)])
	}
	if h.grants == 0 {
		t.Errorf("no lock was granted: the run proves nothing")
	}
	t.Logf("%d grants, 0 overlaps", h.grants)
}

// TestRedlockTokensAcrossMinorityRestart restarts one master at a time with
// an empty dataset between acquisitions, each made on a different quorum
// (one master's proxy refuses connections): the token still increases.
// It also raises one master's fence far above the clocks (a master whose
// clock ran ahead): the quorums that follow without that master still give
// higher tokens, which only the acquirer's write-back to its quorum makes
// possible.
func TestRedlockTokensAcrossMinorityRestart(t *testing.T) {
	t.Parallel()
	masters := testenv.NewRedisMasters(t, 3)
	l, ps := newRedlock(t, masters, 2*time.Second)
	ctx := t.Context()
	key := "restart"
	fence := redis.KeysOf(key).Fence

	var last uint64
	take := func(step string, without int) {
		t.Helper()
		ps[without].Reset()
		defer ps[without].Heal()
		// Lock, not TryLock: a request of the previous step that the
		// proxy held up may still set the key on a master, briefly,
		// before it is undone.
		lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		lk, err := l.Lock(lctx, key)
		if err != nil {
			t.Fatalf("%s: Lock without master %d: %v", step, without, err)
		}
		if tok := lk.Token(); tok <= last {
			t.Errorf("%s: token %d is not above the previous %d", step, tok, last)
		} else {
			last = tok
		}
		if err := lk.Unlock(ctx); err != nil {
			t.Fatalf("%s: Unlock: %v", step, err)
		}
	}
	take("first", 2)

	// Master 0's fence far ahead: the next token comes from it, and is
	// written back to master 1.
	ahead := last + uint64(time.Hour/time.Microsecond)
	if err := newClient(t, masters[0].Addr()).Set(ctx, fence, strconv.FormatUint(ahead, 10), time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	take("fence ahead on master 0", 2)
	if last <= ahead {
		t.Fatalf("token %d did not come from master 0's fence %d", last, ahead)
	}
	take("quorum without master 0", 0) // master 1's fence, written back
	for round := range 2 {
		for i, m := range masters {
			m.Restart(t)
			if n := newClient(t, m.Addr()).Exists(ctx, fence).Val(); n != 0 {
				t.Fatalf("fence key survived the restart; the test would not prove anything")
			}
			take("round "+strconv.Itoa(round)+": master "+strconv.Itoa(i)+" restarted", (i+1)%len(masters))
		}
	}
}
