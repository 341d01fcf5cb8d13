package mysql_test

import (
	"crypto/rand"
	"fmt"
	mrand "math/rand/v2"
	"testing"
	"time"

	"github.com/golocker/locker"
	"github.com/golocker/locker/internal/testenv"
	"github.com/golocker/locker/mysql"
)

// TestNamedLockIntruder: a USAGE-only account (no privilege on the table)
// holding a key's named lock, whose name is predictable, must not make a
// waiter sleep through the holder's TTL: each hand-off stays within two
// checks of the table by the waiter in line (at the Locker's backoff step,
// at least 500 ms, at most 1 s, and taking a row free for 500 ms) plus a
// round trip, where it used to take the holder's whole remaining TTL.
// The hand-offs are logged next to those of a polling waiter.
//
// What is asserted is the contract, not a latency: the waiter, in line
// since the grant, holds the key before the grant would have expired (the
// holder's Deadline as granted). A waiter that sleeps through the TTL
// misses that; so does one whose checks stopped, which waits out its
// GET_LOCK (10 s). A round that misses it runs again, up to three attempts,
// as the conformance suite reruns a late delivery: a loaded machine may
// stretch one hand-off, a broken waiter is late in every attempt. The
// test's ctx bounds a hang.
func TestNamedLockIntruder(t *testing.T) {
	dsn := testenv.NewDatabase(t)
	_, admin := openGorm(t, dsnConfig(t, dsn, ""))
	ctx := ctxFor(t, 2*time.Minute)
	var database string
	if err := admin.QueryRowContext(ctx, "SELECT DATABASE()").Scan(&database); err != nil {
		t.Fatal(err)
	}
	user := "intruder_" + rand.Text()[:8]
	if _, err := admin.ExecContext(ctx, fmt.Sprintf("CREATE USER '%s'@'%%' IDENTIFIED BY 'pw'", user)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = admin.Exec(fmt.Sprintf("DROP USER '%s'@'%%'", user)) })
	icfg := dsnConfig(t, dsn, "")
	icfg.User, icfg.Passwd, icfg.DBName = user, "pw", ""
	_, intruder := openGorm(t, icfg)
	conn, err := intruder.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	key := "intruded"
	var got int
	if err := conn.QueryRowContext(ctx, "SELECT GET_LOCK(?, 0)", mysql.LockName(database, mysql.DefaultTable, key)).Scan(&got); err != nil || got != 1 {
		t.Fatalf("the USAGE-only account could not take the named lock: %d, %v", got, err)
	}

	const ttl = 6 * time.Second
	for _, c := range []struct {
		name string
		cfg  mysql.Config
		opts []locker.Option
	}{
		{"default backoff (max 500ms)", mysql.Config{}, nil},
		{"constant backoff 100ms", mysql.Config{}, []locker.Option{locker.WithBackoff(locker.ConstantBackoff(100 * time.Millisecond))}},
		{"polling, default backoff", mysql.Config{PollOnly: true}, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			holder := newLocker(t, dsn, mysql.Config{}, locker.WithTTL(ttl))
			waiter := newLocker(t, dsn, c.cfg, append([]locker.Option{locker.WithTTL(ttl)}, c.opts...)...)
			const attempts = 3
			for round, attempt := 0, 1; round < 3; {
				lk, err := holder.Lock(ctx, key)
				if err != nil {
					t.Fatal(err)
				}
				expiry := lk.Deadline() // the grant's, before any renewal
				res := make(chan time.Time, 1)
				go func() {
					wl, err := waiter.Lock(ctx, key)
					res <- time.Now()
					if err != nil {
						t.Error(err)
						return
					}
					_ = wl.Unlock(ctx)
				}()
				// The waiter reaches its longest backoff step; a random
				// moment samples the phase of its waits.
				time.Sleep(time.Second + mrand.N(time.Second))
				released := time.Now()
				if err := lk.Unlock(ctx); err != nil {
					t.Fatal(err)
				}
				got := <-res
				t.Logf("round %d: hand-off took %v with the named lock held by another account", round, got.Sub(released).Round(time.Millisecond))
				if got.Before(expiry) {
					round, attempt = round+1, 1
					continue
				}
				late := fmt.Sprintf("round %d, attempt %d of %d: the waiter held the key %v after the holder's grant would have expired",
					round, attempt, attempts, got.Sub(expiry).Round(time.Millisecond))
				if attempt == attempts {
					t.Fatalf("%s: it slept through the holder's TTL (%v) in every attempt", late, ttl)
				}
				t.Logf("%s: the round runs again", late)
				attempt++
			}
		})
	}
}
