package etcd_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/golocker/locker"
	"github.com/golocker/locker/etcd"
)

// TestSetLimitRacesAcquire: Lockers that wait for permits while another
// changes the limit again and again never hold more permits at once than
// the highest limit set, each get a token above every token granted before
// they asked, and leave nothing behind: no holder or waiter key, and no
// limit record, once the last of them released.
func TestSetLimitRacesAcquire(t *testing.T) {
	eps := sharedEtcd(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	admin := newClient(t, eps)
	key := uniqueKey(t)
	const workers, rounds = 6, 25
	limits := []int{2, 1, 3}
	most := slices.Max(limits)

	var (
		mu             sync.Mutex
		holding, peak  int
		maxToken       uint64
		grants, misses int
	)
	setter := newLocker(t, eps)
	stop := make(chan struct{})
	var flips sync.WaitGroup
	flips.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(10 * time.Millisecond):
			}
			if err := locker.SetLimit(ctx, setter, key, limits[i%len(limits)]); err != nil {
				t.Errorf("SetLimit(%d) while Lockers wait: %v", limits[i%len(limits)], err)
				return
			}
		}
	})
	var work sync.WaitGroup
	for range workers {
		l := newLocker(t, eps)
		work.Go(func() {
			limit := most
			for done := 0; done < rounds && ctx.Err() == nil; {
				sem, err := locker.NewSemaphore(l, key, limit)
				if err != nil {
					t.Errorf("NewSemaphore(%d): %v", limit, err)
					return
				}
				mu.Lock()
				before := maxToken
				mu.Unlock()
				p, err := sem.Acquire(ctx)
				if errors.Is(err, locker.ErrInvalidOption) {
					// Another limit rules: take it, as a Semaphore kept up
					// to date with SetLimit would.
					mu.Lock()
					misses++
					mu.Unlock()
					if st, err := locker.Inspect(ctx, l, key); err == nil && st.Limit > 0 {
						limit = st.Limit
					}
					continue
				}
				if err != nil {
					t.Errorf("Acquire with a limit of %d: %v", limit, err)
					return
				}
				mu.Lock()
				holding++
				peak = max(peak, holding)
				if p.Token() <= before {
					t.Errorf("a permit got token %d, not above %d granted before it was asked for", p.Token(), before)
				}
				maxToken = max(maxToken, p.Token())
				grants++
				mu.Unlock()
				time.Sleep(time.Millisecond)
				mu.Lock()
				holding--
				mu.Unlock()
				if err := p.Unlock(ctx); err != nil {
					t.Errorf("Unlock: %v", err)
				}
				done++
			}
		})
	}
	work.Wait()
	close(stop)
	flips.Wait()
	t.Logf("%d grants, %d waits refused for an old limit, at most %d permits held at once", grants, misses, peak)
	if peak > most {
		t.Errorf("%d permits were held at once; no limit above %d was ever set", peak, most)
	}
	if ws := waiters(t, admin, key); len(ws) != 0 {
		t.Errorf("%d keys left under the semaphore's directory once every permit was released", len(ws))
	}
	resp, err := admin.Get(ctx, etcd.LimitKey(testPrefix+key))
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) != 0 {
		t.Errorf("the limit record %q outlived the semaphore's last holder", resp.Kvs[0].Value)
	}
}
