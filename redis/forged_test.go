package redis

import (
	"crypto/rand"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/golocker/locker"
	"github.com/golocker/locker/internal/storeenv"
)

// TestForgedGrantIsNotTrusted: a client that may read the lock keys and
// PUBLISH, but not write (an ACL user, its DEL refused), forges a hand-over
// message naming a queued waiter, with an enormous token. The waiter must
// keep waiting (a grant message only wakes it: the lock and its token come
// from Redis), and the real holder keeps the key.
func TestForgedGrantIsNotTrusted(t *testing.T) {
	t.Parallel()
	srv := storeenv.Redis(t)
	admin := newClient(t, srv.Addr())
	ctx := ctxFor(t, 30*time.Second)
	user := "forger_" + rand.Text()[:8]
	if err := admin.Do(ctx, "ACL", "SETUSER", user, "on", ">pw", "~*", "&*", "-@all", "+@read", "+publish", "+ping", "+hello", "+auth").Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = admin.Do(ctx, "ACL", "DELUSER", user).Err() })
	o := clientOptions(srv.Addr())
	o.Username, o.Password = user, "pw"
	forger := goredis.NewClient(o)
	t.Cleanup(func() { _ = forger.Close() })

	key := uniqueKey(t)
	holder, _ := newTestLocker(t, newClient(t, srv.Addr()), locker.WithTTL(10*time.Second))
	waiter, _ := newTestLocker(t, newClient(t, srv.Addr()), locker.WithTTL(10*time.Second))
	other, _ := newTestLocker(t, newClient(t, srv.Addr()), locker.WithTTL(10*time.Second))
	lk, err := holder.Lock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	res := lockAsync(ctx, waiter, key)
	waitQueued(t, ctx, admin, key, 1)
	if err := forger.Del(ctx, name(kindLock, key)).Err(); err == nil || !strings.Contains(err.Error(), "NOPERM") {
		t.Fatalf("the forger's DEL must be refused by its ACL: %v", err)
	}
	// Read the waiter's owner token and attempt number, as the forger can.
	owners, err := forger.ZRange(ctx, name(kindQueue, key), 0, 0).Result()
	if err != nil || len(owners) != 1 {
		t.Fatalf("the forger reads the queue: %v, %v", owners, err)
	}
	rec, err := forger.HGet(ctx, name(kindWaiters, key), owners[0]).Result()
	if err != nil {
		t.Fatal(err)
	}
	// <deadline> <seq> <ttl> <lid> w<wake> <label>
	seq, lid := strings.Fields(rec)[1], strings.Fields(rec)[3]
	const forged = "4611686018427387904" // 2^62
	for range 3 {
		if err := forger.Publish(ctx, channelName(key)+":"+lid, "grant "+owners[0]+" "+seq+" "+forged+" 1000000000").Err(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	select {
	case r := <-res:
		if r.err == nil {
			t.Fatalf("a forged grant made the waiter return holding the lock, token %d, while the holder held it", r.lk.Token())
		}
		t.Fatalf("a forged grant ended the wait: %v", r.err)
	case <-time.After(500 * time.Millisecond):
	}
	if ol, err := other.TryLock(ctx, key); err == nil {
		_ = ol.Unlock(ctx)
		t.Fatal("the real holder lost the key")
	}
	select {
	case <-lk.Done():
		t.Fatalf("the real holder's lock ended: %v", lk.Err())
	default:
	}
	if err := lk.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-res
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.lk.Token() >= 1<<62 || r.lk.Token() <= lk.Token() {
		t.Errorf("the waiter got token %d after the holder's %d: not the store's", r.lk.Token(), lk.Token())
	}
	_ = r.lk.Unlock(ctx)
}
