package redis

import (
	"context"
	"crypto/rand"
	"errors"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/golocker/locker"
	"github.com/golocker/locker/internal/storeenv"
)

// TestOwnClientHidesItsCommandsFromTheCallersHooks: a Locker with
// Config.OwnClient runs its calls on a client of its own, which does not
// run the hooks of the caller's client: they see no dial and no command of
// a TryLock, a Lock with a cancellable ctx, and a Lock that waits (pub/sub
// and the inbox). Without OwnClient, the same calls pass through the hook:
// the count can fail.
func TestOwnClientHidesItsCommandsFromTheCallersHooks(t *testing.T) {
	srv := storeenv.Redis(t)
	for _, own := range []bool{false, true} {
		name := "caller's client"
		if own {
			name = "OwnClient"
		}
		t.Run(name, func(t *testing.T) {
			ctx := ctxFor(t, 30*time.Second)
			c := newClient(t, srv.Addr())
			var h countingHook
			c.AddHook(&h)
			l, err := Config{OwnClient: own}.New(c, locker.WithTTL(10*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			other, _ := newTestLocker(t, newClient(t, srv.Addr()), locker.WithTTL(10*time.Second))
			key := uniqueKey(t)

			lk, err := l.TryLock(context.Background(), key)
			if err != nil {
				t.Fatal(err)
			}
			if err := lk.Unlock(context.Background()); err != nil {
				t.Fatal(err)
			}
			if lk, err = l.Lock(ctx, key); err != nil {
				t.Fatal(err)
			}
			if err := lk.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
			held, err := other.TryLock(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			got := lockAndUnlock(ctx, l, key)
			for !waiting(t, ctx, other, key) {
				time.Sleep(time.Millisecond)
			}
			if err := held.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
			if err := <-got; err != nil {
				t.Fatalf("the waiting Lock: %v", err)
			}
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			dials, cmds := h.dials.Load(), h.commands.Load()+h.piped.Load()
			t.Logf("the caller's hook saw %d dials and %d commands", dials, cmds)
			switch {
			case own && dials+cmds != 0:
				t.Errorf("with Config.OwnClient the caller's hooks must see none of the Locker's dials and commands: saw %d dials, %d commands", dials, cmds)
			case !own && (dials == 0 || cmds == 0):
				t.Errorf("on the caller's client its hooks must see the Locker's dials and commands: saw %d dials, %d commands", dials, cmds)
			}
		})
	}
}

// TestOwnClientOutlivesTheCallersClient: the connections of a Locker with
// Config.OwnClient are its own. The Locker works after the caller closed
// its client, and its Close leaves no connection of it open on the server
// (they carry the caller's ClientName, which the copy keeps).
func TestOwnClientOutlivesTheCallersClient(t *testing.T) {
	srv := storeenv.Redis(t)
	ctx := ctxFor(t, 30*time.Second)
	admin := newClient(t, srv.Addr())
	o := clientOptions(srv.Addr())
	o.ClientName = "ownclient-" + rand.Text()
	c := goredis.NewClient(o)
	l, err := Config{OwnClient: true}.New(c, locker.WithTTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	key := uniqueKey(t)
	for _, lctx := range []context.Context{context.Background(), ctx} {
		lk, err := l.TryLock(lctx, key)
		if err != nil {
			t.Fatalf("TryLock after the caller closed its client: %v", err)
		}
		if err := lk.Unlock(lctx); err != nil {
			t.Fatalf("Unlock after the caller closed its client: %v", err)
		}
	}
	if n := connsNamed(ctx, t, admin, o.ClientName); n == 0 {
		t.Fatalf("no connection is named %s: the test cannot see the Locker's connections", o.ClientName)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	for {
		n := connsNamed(ctx, t, admin, o.ClientName)
		if n == 0 {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the Locker's Close must close every connection of its own client: %d stay open", n)
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// connsNamed counts the server's connections named name.
func connsNamed(ctx context.Context, t *testing.T, admin *goredis.Client, name string) int {
	t.Helper()
	list, err := admin.ClientList(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(list, " name="+name+" ")
}

// wrappedClient is a caller's wrapper of a go-redis client.
type wrappedClient struct{ *goredis.Client }

// TestOwnClientRefusesOtherClients: Config.OwnClient copies a
// *goredis.Client only; New refuses it with any other client.
func TestOwnClientRefusesOtherClients(t *testing.T) {
	addr := storeenv.Redis(t).Addr()
	cluster := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: []string{addr}})
	defer cluster.Close()
	ring := goredis.NewRing(&goredis.RingOptions{Addrs: map[string]string{"a": addr}})
	defer ring.Close()
	for name, c := range map[string]Client{"cluster": cluster, "ring": ring, "wrapper": wrappedClient{newClient(t, addr)}} {
		l, err := Config{OwnClient: true}.New(c)
		if l != nil || !errors.Is(err, locker.ErrInvalidOption) || !strings.Contains(err.Error(), "Config.OwnClient") {
			t.Errorf("Config{OwnClient: true}.New(%s) = %v, %v; want nil and an error matching ErrInvalidOption naming Config.OwnClient", name, l, err)
		}
	}
}
