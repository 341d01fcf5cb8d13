package postgres

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golocker/locker/driver"
)

// slowWrites delays every write of its connection by delay while on is set.
type slowWrites struct {
	net.Conn
	on    *atomic.Bool
	delay time.Duration
}

func (c slowWrites) Write(p []byte) (int, error) {
	if c.on.Load() {
		time.Sleep(c.delay)
	}
	return c.Conn.Write(p)
}

// TestLateStatementsAreNoHolder: when every statement of an acquisition
// reaches the database after its fence (a slow dial, pool or link; seen in
// CI as TestRenewalNeedsNoNewConnection's TryLock of a fresh key on a
// *sql.DB that dials for every statement), the statements took nothing and
// nobody holds the key. TryAcquire and TryAcquireShared must say that the
// database answers too late, never that the key is held ("key held by
// another owner", which both answered).
func TestLateStatementsAreNoHolder(t *testing.T) {
	// The shortest fence window, so that the late statements cost little.
	const ttl = time.Second
	var slow atomic.Bool
	delay := driver.FenceWindow(ttl) + 100*time.Millisecond
	d, ctx := sqlDBDriver(t, func(c net.Conn) net.Conn { return slowWrites{c, &slow, delay} })
	key := fmt.Sprintf("late/%x", rand.Uint64())
	// A first statement, so that the driver's clock mapping is set.
	warm := driver.Request{Key: key + "/warm", Owner: fmt.Sprintf("late.%x", rand.Uint64()), TTL: ttl}
	g, err := d.TryAcquire(ctx, warm)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Release(ctx, driver.Lease{Key: warm.Key, Owner: warm.Owner, Token: g.Token, TTL: ttl, State: g.State}); err != nil {
		t.Fatal(err)
	}
	slow.Store(true)
	calls := map[string]func() error{
		"TryAcquire": func() error {
			_, err := d.TryAcquire(ctx, driver.Request{Key: key + "/plain", Owner: fmt.Sprintf("late.%x", rand.Uint64()), TTL: ttl})
			return err
		},
		"TryAcquireShared": func() error {
			_, err := d.TryAcquireShared(ctx, driver.Request{Key: key + "/shared", Owner: fmt.Sprintf("late.%x", rand.Uint64()), TTL: ttl},
				driver.Share{Mode: driver.Permits, Weight: 1, Limit: 2})
			return err
		},
	}
	for name, call := range calls {
		err := call()
		switch {
		case err == nil:
			t.Errorf("%s with every statement %v late took the key; want an error", name, delay)
		case errors.Is(err, driver.ErrHeld):
			t.Errorf("%s with every statement late = %v; want an error that says the database answers late, not that the key is held", name, err)
		case !errors.Is(err, errFenced):
			t.Errorf("%s with every statement late = %v; want one matching %q", name, err, errFenced)
		}
	}
	slow.Store(false)
	// Nothing was taken: both keys are free.
	for _, k := range []string{key + "/plain", key + "/shared"} {
		req := driver.Request{Key: k, Owner: fmt.Sprintf("late.%x", rand.Uint64()), TTL: ttl}
		g, err := d.TryAcquire(ctx, req)
		if err != nil {
			t.Errorf("TryAcquire of %s after the late statements: %v; want it free", k, err)
			continue
		}
		if err := d.Release(ctx, driver.Lease{Key: k, Owner: req.Owner, Token: g.Token, TTL: ttl, State: g.State}); err != nil {
			t.Error(err)
		}
	}
}
