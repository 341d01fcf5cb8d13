package conformance

import (
	"fmt"
	"sync"
	"time"

	"github.com/golocker/locker"
)

// survives is the contract of the Failover case.
const survives = "a lock granted before or while the store fails over must stay its holder's until its Done closes: " + exclusive

// maxFailoverLocks bounds the locks the Failover case takes.
const maxFailoverLocks = 300

// testFailover takes locks, one after the other, before and while the store
// fails over, while another Locker tries every key taken so far, until a TTL
// and a half after the failover: it may only get a key whose first holder's
// Done has closed, with a higher token. A backend whose replication lags its
// grants (Redis without redis.Config.Replicas) gives keys out twice here.
func testFailover(c *caseT) {
	c.need("Failover", c.h.Failover != nil, "fail the store over to a replica")
	ctx := c.ctx(c.within(6) + 2*time.Minute) // a failover takes its time
	a, b := c.newLocker(), c.newLocker()
	base := c.key()

	var (
		mu    sync.Mutex
		locks []locker.Lock
	)
	stop, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		got := map[int]bool{}
		for sleep(ctx, 10*time.Millisecond) {
			select {
			case <-stop:
				return
			default:
			}
			mu.Lock()
			taken := locks
			mu.Unlock()
			for i, lk := range taken {
				if got[i] {
					continue
				}
				lb, err := b.TryLock(ctx, lk.Key())
				if err != nil {
					continue
				}
				got[i] = true
				select {
				case <-lk.Done():
				default:
					c.Errorf("%s: another Locker got %s (token %d) while its first holder's Done was open (token %d)", survives, short(lk.Key()), lb.Token(), lk.Token())
				}
				if lb.Token() <= lk.Token() {
					c.Errorf("%s: token %d after token %d on %s", fencing, lb.Token(), lk.Token(), short(lk.Key()))
				}
				releaseIf(ctx, lb, nil)
			}
		}
	}()

	failedOver := make(chan struct{})
	go func() {
		defer close(failedOver)
		c.h.Failover(c.t)
	}()
	n := 0
	for i := 0; ; i++ {
		// A refusal or a store error while failing over is fine: only
		// the locks granted count.
		if n < maxFailoverLocks {
			if lk, err := a.TryLock(ctx, fmt.Sprintf("%s/%d", base, i)); err == nil {
				mu.Lock()
				locks = append(locks, lk)
				mu.Unlock()
				n++
			}
		}
		select {
		case <-failedOver:
		case <-ctx.Done():
			c.Fatalf("Harness.Failover did not return: %v", ctx.Err())
		case <-time.After(10 * time.Millisecond): // many locks in the failover's window
			continue
		}
		break
	}
	c.Logf("%d locks granted before and while the store failed over", n)
	sleep(ctx, c.h.TTL+c.h.TTL/2) // renewals notice lost locks; the other Locker keeps trying
	close(stop)
	<-stopped
	for _, lk := range locks {
		_ = lk.Unlock(ctx)
	}
}
