package redis_test

import (
	"context"
	"crypto/rand"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/golocker/locker"
	"github.com/golocker/locker/redis"
)

// TestRenewalsDoNotWaitForTheCallersPool: the caller's own BLPOPs hold
// every connection of its client, two of its pool and two of its pipeline
// pool, for two and a half TTLs; the Locker's lock, permit and read hold
// must stay held, while the server answers at once. Renewals that
// pipelined on the caller's client waited for a connection until
// PoolTimeout and lost all three.
func TestRenewalsDoNotWaitForTheCallersPool(t *testing.T) {
	const ttl = time.Second
	holds := map[string]func(ctx context.Context, l locker.Locker, key string) (locker.Lock, error){
		"lock": func(ctx context.Context, l locker.Locker, key string) (locker.Lock, error) {
			return l.TryLock(ctx, key)
		},
		"permit": func(ctx context.Context, l locker.Locker, key string) (locker.Lock, error) {
			s, err := locker.NewSemaphore(l, key, 2)
			if err != nil {
				return nil, err
			}
			return s.TryAcquire(ctx)
		},
		"read hold": func(ctx context.Context, l locker.Locker, key string) (locker.Lock, error) {
			m, err := locker.NewRWMutex(l, key)
			if err != nil {
				return nil, err
			}
			return m.TryRLock(ctx)
		},
	}
	for kind, hold := range holds {
		t.Run(kind, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			const plain, piped = 2, 2
			// No read timeout: a pipeline's read would not wait past it
			// for a blocking command.
			c := goredis.NewClient(&goredis.Options{Addr: redisAddr, PoolSize: plain, PipelinePoolSize: piped, ReadTimeout: -1})
			defer c.Close()
			admin := goredis.NewClient(&goredis.Options{Addr: redisAddr})
			defer admin.Close()
			l, err := redis.New(c, locker.WithTTL(ttl))
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			lk, err := hold(ctx, l, "busypool-"+rand.Text())
			if err != nil {
				t.Fatal(err)
			}
			// The caller's blocking commands, until a push ends each: the
			// pipelined ones first, one at a time, so that none spills to
			// the main pool (a pipeline finding the pipeline pool dialling
			// for another does).
			list := "busypool-list-" + rand.Text()
			defer admin.Del(context.Background(), list)
			var wg sync.WaitGroup
			errs := make(chan error, plain+piped)
			ended := false // the pushes ended the BLPOPs
			defer func() {
				if !ended {
					_ = c.Close() // ends them
				}
				wg.Wait()
				close(errs)
				for err := range errs {
					if !ended {
						t.Logf("the caller's BLPOP: %v", err)
					} else {
						t.Errorf("the caller's BLPOP: %v", err)
					}
				}
			}()
			inUse := func(s *goredis.PoolStats) int { return int(s.TotalConns) - int(s.IdleConns) }
			fill := func(n int, block func() error, taken func() int) {
				for i := range n {
					wg.Go(func() {
						if err := block(); err != nil {
							errs <- err
						}
					})
					for taken() <= i {
						select {
						case err := <-errs:
							t.Fatalf("the caller's BLPOP: %v", err)
						case <-ctx.Done():
							t.Fatalf("%d of %d connections taken by the caller's BLPOPs", taken(), n)
						default:
						}
						time.Sleep(5 * time.Millisecond)
					}
				}
			}
			fill(piped, func() error {
				_, err := c.Pipelined(context.Background(), func(p goredis.Pipeliner) error {
					return p.BLPop(context.Background(), 0, list).Err()
				})
				return err
			}, func() int { return inUse((*goredis.PoolStats)(c.PoolStats().PipelineStats)) })
			fill(plain, func() error { return c.BLPop(context.Background(), 0, list).Err() },
				func() int { return inUse(c.PoolStats()) })
			select {
			case <-lk.Done():
				t.Errorf("the %s was lost while the caller's commands held every connection of its client: %v", kind, lk.Err())
			case <-time.After(5 * ttl / 2):
			}
			for range plain + piped {
				admin.LPush(ctx, list, 1)
			}
			ended = true
			wg.Wait()
			if err := lk.Unlock(ctx); err != nil && lk.Err() == nil {
				t.Fatal(err)
			}
		})
	}
}
