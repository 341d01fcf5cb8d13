package redis

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/golocker/locker"
	"github.com/golocker/locker/driver"
	"github.com/golocker/locker/internal/storeenv"
)

// TestReplicasOptions: bad Config.Replicas and Config.ReplicaTimeout
// values, and Replicas on a Cluster client, are refused by New with an
// error naming them.
func TestReplicasOptions(t *testing.T) {
	single := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:1"})
	defer single.Close()
	cluster := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}})
	defer cluster.Close()
	impatient := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:1", ReadTimeout: 200 * time.Millisecond})
	defer impatient.Close()
	for _, c := range []struct {
		cfg    Config
		client Client
		names  string
	}{
		{Config{Replicas: -1}, single, "Config.Replicas"},
		{Config{Replicas: 1, ReplicaTimeout: time.Microsecond}, single, "Config.ReplicaTimeout"},
		{Config{Replicas: 1, ReplicaTimeout: 2 * time.Second}, single, "Config.ReplicaTimeout"}, // above TTL/3
		{Config{Replicas: 1}, cluster, "Config.Replicas"},
		{Config{Replicas: 1}, impatient, "ReadTimeout 200ms"}, // WAIT's 250 ms would outlast the client's read
	} {
		l, err := c.cfg.New(c.client, locker.WithTTL(3*time.Second))
		if err == nil {
			_ = l.Close()
			t.Errorf("%+v on %T: New must fail", c.cfg, c.client)
			continue
		}
		if !errors.Is(err, locker.ErrInvalidOption) || !strings.Contains(err.Error(), c.names) {
			t.Errorf("%+v on %T: New = %v; want an error matching ErrInvalidOption naming %s", c.cfg, c.client, err, c.names)
		}
	}
}

// TestReplicasUnconfirmedIsUndone: on a primary without replicas, with
// Config.Replicas 1, TryLock fails (WAIT never confirms) and leaves the key
// free, and a waiting Lock keeps trying until its ctx ends, leaving nothing
// behind either.
func TestReplicasUnconfirmedIsUndone(t *testing.T) {
	t.Parallel()
	srv := storeenv.Redis(t)
	admin := newClient(t, srv.Addr())
	l, err := Config{Replicas: 1, ReplicaTimeout: 20 * time.Millisecond}.New(newClient(t, srv.Addr()), locker.WithTTL(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx := ctxFor(t, 10*time.Second)
	key := uniqueKey(t)
	if lk, err := l.TryLock(ctx, key); err == nil {
		_ = lk.Unlock(ctx)
		t.Fatal("TryLock must fail when no replica confirms the lock")
	} else if !errors.Is(err, errNotReplicated) {
		t.Errorf("TryLock: %v; want an error saying the lock did not reach the replicas", err)
	}
	wctx := ctxFor(t, 300*time.Millisecond)
	if lk, err := l.Lock(wctx, key); err == nil {
		_ = lk.Unlock(ctx)
		t.Fatal("Lock must not return a lock no replica confirmed")
	}
	for _, k := range scriptKeys(key)[:1] {
		if n := admin.Exists(ctx, k).Val(); n != 0 {
			t.Errorf("%s is left behind by the undone acquisitions", k)
		}
	}
	if n := admin.ZCard(ctx, name(kindQueue, key)).Val(); n != 0 {
		t.Errorf("%d waiters left in the queue", n)
	}
}

// TestReplicasUnconfirmedWrites: on a primary without replicas, with
// Config.Replicas 1, SetData, SetLimit, renewals, Keep and Break (of a
// lock and of a permit) fail with an error matching errNotReplicated,
// since WAIT never confirms them. The holds are taken first without Replicas, the only way
// to hold anything on that primary. Writes that change nothing (a lock
// not held, a limit of a key nobody uses) wait for no replica.
func TestReplicasUnconfirmedWrites(t *testing.T) {
	t.Parallel()
	srv := storeenv.Redis(t)
	d := newDriver(newClient(t, srv.Addr()))
	d.replicaTimeout = 20 * time.Millisecond
	ctx := ctxFor(t, 10*time.Second)
	key := uniqueKey(t)
	g, err := d.TryAcquire(ctx, driver.Request{Key: key, Owner: "o1", TTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	lease := driver.Lease{Key: key, Owner: "o1", Token: g.Token, TTL: 10 * time.Second, State: g.State}
	sg, err := d.TryAcquireShared(ctx, driver.Request{Key: key + "-sem", Owner: "o2", TTL: 10 * time.Second},
		driver.Share{Mode: driver.Permits, Limit: 2, Weight: 1})
	if err != nil {
		t.Fatal(err)
	}
	permit := driver.Lease{Key: key + "-sem", Owner: "o2", Token: sg.Token, TTL: 10 * time.Second, State: sg.State}

	d.replicas = 1
	for _, c := range []struct {
		name  string
		write func() error
	}{
		{"SetData", func() error { return d.SetData(ctx, lease, []byte("new")) }},
		{"SetLimit", func() error { return d.SetLimit(ctx, key+"-sem", 3) }},
		{"a renewal", func() error { return renewOne(ctx, d, lease) }},
		{"a permit's renewal", func() error { return renewOne(ctx, d, permit) }},
		{"Keep", func() error { return d.Keep(ctx, lease, 5*time.Second) }},
		{"Keep of a permit", func() error { return d.Keep(ctx, permit, 5*time.Second) }},
		{"Break", func() error { return d.Break(ctx, key) }},
		{"Break of a semaphore", func() error { return d.Break(ctx, key+"-sem") }},
	} {
		if err := c.write(); !errors.Is(err, errNotReplicated) {
			t.Errorf("%s: %v; with Config.Replicas 1 and no replica, want an error saying the write did not reach the replicas", c.name, err)
		}
	}
	other := driver.Lease{Key: key, Owner: "other", TTL: 10 * time.Second}
	if err := d.SetData(ctx, other, []byte("x")); !errors.Is(err, driver.ErrNotHeld) {
		t.Errorf("SetData of a lock not held: %v; want an error matching ErrNotHeld", err)
	}
	if err := d.Break(ctx, key); !errors.Is(err, driver.ErrNotHeld) {
		t.Errorf("Break of a free key: %v; want an error matching ErrNotHeld", err)
	}
	if err := d.SetLimit(ctx, key+"-unused", 3); err != nil {
		t.Errorf("SetLimit of a key nobody uses: %v; it writes nothing and must wait for no replica", err)
	}
}

// renewOne renews l alone through d.RenewBatch.
func renewOne(ctx context.Context, d *redisDriver, l driver.Lease) error {
	_, errs, err := d.RenewBatch(ctx, []driver.Lease{l})
	if err != nil {
		return err
	}
	return errs[0]
}
