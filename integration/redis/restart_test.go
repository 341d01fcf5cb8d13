package redis_test

import (
	"testing"
	"time"

	"github.com/golocker/locker"
	"github.com/golocker/locker/internal/testenv"
	"github.com/golocker/locker/redis"
)

// TestTokensAcrossRestart restarts the server (no persistence) between two
// acquisitions of a key: the fence key is gone, the token still increases.
func TestTokensAcrossRestart(t *testing.T) {
	t.Parallel()
	srv := testenv.NewRedis(t)
	c := newClient(t, srv.Addr())
	admin := newClient(t, srv.Addr())
	l, err := redis.New(c, locker.WithTTL(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	ctx := t.Context()

	var last uint64
	for i := range 3 {
		lk, err := l.TryLock(ctx, "k")
		if err != nil {
			t.Fatalf("TryLock %d: %v", i, err)
		}
		if tok := lk.Token(); tok <= last {
			t.Errorf("token %d after restart %d is not above the previous %d", tok, i, last)
		} else {
			last = tok
		}
		if err := lk.Unlock(ctx); err != nil {
			t.Fatalf("Unlock %d: %v", i, err)
		}
		srv.Restart(t)
		if n := admin.Exists(ctx, redis.KeysOf("k").Fence).Val(); n != 0 {
			t.Fatalf("fence key survived the restart; the test would not prove anything")
		}
	}
}
