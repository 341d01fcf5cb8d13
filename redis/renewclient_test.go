package redis_test

import (
	"context"
	"crypto/rand"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/golocker/locker"
	"github.com/golocker/locker/internal/renewtest"
	"github.com/golocker/locker/redis"
)

// TestRenewalsDoNotWaitForTheCallersPool: the caller's own BLPOPs hold
// every connection of its client (a pool of 3, pipelines on it:
// PipelinePoolSize -1) for two and a half TTLs; the Locker's lock, permit
// and read hold must stay held, while the server answers at once.
// Renewals that pipelined on the caller's client waited for a connection
// until PoolTimeout and lost all three. (With go-redis's pipeline pool,
// the caller's pipelines must fill that pool too: the conformance
// harnesses' Busy does; here a pipeline finding the pipeline pool
// dialling for another spilled to the main pool now and then, and left a
// pipeline connection free.)
func TestRenewalsDoNotWaitForTheCallersPool(t *testing.T) {
	const ttl = time.Second
	for _, hk := range renewtest.Holds {
		t.Run(hk.Name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			const conns = 3
			c := goredis.NewClient(&goredis.Options{Addr: redisAddr, PoolSize: conns, PipelinePoolSize: -1})
			defer c.Close()
			admin := goredis.NewClient(&goredis.Options{Addr: redisAddr})
			defer admin.Close()
			l, err := redis.New(c, locker.WithTTL(ttl))
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			lk, err := hk.Try(ctx, l, "busypool-"+rand.Text())
			if err != nil {
				t.Fatal(err)
			}
			// The caller's blocking commands, until a push ends each.
			list := "busypool-list-" + rand.Text()
			defer admin.Del(context.Background(), list)
			var wg sync.WaitGroup
			errs := make(chan error, conns)
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
			for range conns {
				wg.Go(func() {
					if err := c.BLPop(context.Background(), 0, list).Err(); err != nil {
						errs <- err
					}
				})
			}
			for s := c.PoolStats(); s.TotalConns-s.IdleConns < conns; s = c.PoolStats() {
				select {
				case err := <-errs:
					t.Fatalf("the caller's BLPOP: %v", err)
				case <-ctx.Done():
					t.Fatalf("%d of %d connections taken by the caller's BLPOPs", s.TotalConns-s.IdleConns, conns)
				case <-time.After(5 * time.Millisecond):
				}
			}
			select {
			case <-lk.Done():
				t.Errorf("the %s was lost while the caller's commands held every connection of its client: %v", hk.Name, lk.Err())
			case <-time.After(5 * ttl / 2):
			}
			for range conns {
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
