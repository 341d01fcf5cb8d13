package redis

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/golocker/locker/driver"
)

// Break implements driver.Breaker (locker.ForceUnlock): every shared hold
// of the key ends, or else release.lua runs without its owner check, so
// the key goes to the first waiter as on a release. With Config.Replicas
// it returns only once WAIT confirms the break on the replicas. Otherwise
// the error matches errNotReplicated, and a failover may bring the broken
// holds back until they expire or their holders renew them.
func (d *redisDriver) Break(ctx context.Context, key string) error {
	switch broke, err := d.breakShared(ctx, key); {
	case err != nil:
		return fmt.Errorf("break: %w", err)
	case broke:
		return nil
	}
	n, err := d.runRelease(ctx, newLockNames(key), "", "force", "0")
	if err != nil {
		return fmt.Errorf("break: %w", classify(err))
	}
	if n == 0 {
		return fmt.Errorf("break: %w", driver.ErrNotHeld)
	}
	return nil
}

// Inspect implements driver.Inspector: the lock's value, its PTTL, the
// queue's length, the server's clock and a shared key's holders, in one
// pipeline. The token is the server's clock in µs at the acquisition
// (unless two acquisitions of the key fell in one µs), which gives
// Acquired.
func (d *redisDriver) Inspect(ctx context.Context, key string) (driver.Status, error) {
	ks := KeysOf(key)
	pipe := d.client.Pipeline()
	get := pipe.Get(ctx, ks.Lock)
	pttl := pipe.PTTL(ctx, ks.Lock)
	queued := pipe.ZCard(ctx, ks.Queue)
	now := pipe.Time(ctx)
	shared := readSharedOn(ctx, pipe, ks)
	if _, err := pipe.Exec(ctx); pipeErr(err) != nil {
		return driver.Status{}, fmt.Errorf("inspect: %w", classify(err))
	}
	if st, ok, err := shared.status(now.Val()); ok || err != nil {
		if err != nil {
			err = fmt.Errorf("inspect: %w", classify(err))
		}
		return st, err
	}
	v, err := get.Result()
	return lockStatus(v, errors.Is(err, goredis.Nil), pttl.Val(), queued.Val(), now.Val())
}

// lockStatus is the Status of a lock from its value (absent: free), its
// PTTL, its queue's length and the server's clock.
func lockStatus(v string, absent bool, ttl time.Duration, queued int64, now time.Time) (driver.Status, error) {
	st := driver.Status{Waiters: int(queued)}
	if absent {
		return st, nil
	}
	parts := strings.SplitN(v, " ", 3)
	if len(parts) < 2 {
		return st, fmt.Errorf("inspect: malformed lock value %q", v)
	}
	token, err := strconv.ParseUint(parts[1], 10, 64)
	if err != nil {
		return st, fmt.Errorf("inspect: malformed token in %q", v)
	}
	st.Held, st.Token = true, token
	if len(parts) == 3 {
		st.Label, st.Data = splitLabel(parts[2])
	}
	st.Acquired = time.UnixMicro(int64(min(token, math.MaxInt64))).UTC()
	if ttl > 0 {
		st.Expires = now.Add(ttl).UTC()
	}
	return st, nil
}
