package mysql

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"time"

	"github.com/golocker/locker/driver"
)

// An acquiring statement whose outcome is unknown (its ctx ended, its
// connection broke) may still reach the server much later: TCP delivers
// what was sent before a partition once it heals. Each acquiring statement
// therefore carries a fence, an instant of the database clock after which
// it takes nothing. The undo of such a statement waits until the database
// clock has passed the fence, so that it runs after anything the statement
// can still do, whatever connection either travels on.

const (
	// minFenceWindow and maxFenceWindow bound how long after it was sent an
	// acquiring statement may still take a row: a quarter of the TTL
	// within these bounds, or less when the call's ctx ends sooner.
	minFenceWindow = 250 * time.Millisecond
	maxFenceWindow = 2 * time.Second
)

// fence is the instant after which an acquiring statement takes nothing.
type fence struct {
	local time.Time // on the local monotonic clock
	db    int64     // µs since the epoch on the database clock
}

// fenceWindow is how long after it was sent a statement of a lock with
// this TTL may still take a row.
func fenceWindow(ttl time.Duration) time.Duration {
	return min(max(ttl/4, minFenceWindow), maxFenceWindow)
}

// dbClock maps the local monotonic clock to the database clock, from
// samples of the database clock taken by the driver's statements.
type dbClock struct {
	mu    sync.Mutex
	db    int64     // a sample: µs since the epoch on the database clock
	local time.Time // the local instant of the sample (mid round trip)
	rtt   time.Duration
	set   bool
}

// observe records a database clock reading made by a statement sent at
// sent and answered rtt later. A reading with a long round trip replaces
// only a reading with a longer one, or one a minute old.
func (c *dbClock) observe(db int64, sent time.Time, rtt time.Duration) {
	local := sent.Add(rtt / 2)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.set && rtt > 2*c.rtt && local.Sub(c.local) < time.Minute {
		return
	}
	c.db, c.local, c.rtt, c.set = db, local, rtt, true
}

// at returns the database clock's reading at the local instant t.
func (c *dbClock) at(t time.Time) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.set {
		return t.UnixMicro()
	}
	return c.db + t.Sub(c.local).Microseconds()
}

// sample reads the database clock once.
func (c *dbClock) sample(ctx context.Context, db *sql.DB, query string) (int64, error) {
	var now int64
	sent := time.Now()
	if err := db.QueryRowContext(ctx, query).Scan(&now); err != nil {
		return 0, fmt.Errorf("read the database clock: %w", err)
	}
	c.observe(now, sent, time.Since(sent))
	return now, nil
}

// fenceFor returns the fence of a statement sent at sent for a lock with
// this TTL, under ctx.
func (d *sqlDriver) fenceFor(ctx context.Context, sent time.Time, ttl time.Duration) fence {
	local := sent.Add(fenceWindow(ttl))
	if dl, ok := ctx.Deadline(); ok && dl.Before(local) {
		local = dl
	}
	return fence{local: local, db: d.clock.at(local)}
}

// residue wraps the error of an acquiring statement whose outcome is
// unknown in a driver.Residue whose cleanup gives up the row if owner took
// it, once the statement's fence has passed.
func (d *sqlDriver) residue(err error, key, owner string, f fence) error {
	return &driver.Residue{Err: err, Cleanup: func(ctx context.Context) error {
		return d.undoAcquire(ctx, key, owner, f)
	}}
}

// undoAcquire gives up the row if owner took it in a statement fenced by
// f. It waits until the database clock is past f first, so that the
// statement can take nothing afterwards. It returns driver.ErrNotHeld when
// there is nothing to give up.
func (d *sqlDriver) undoAcquire(ctx context.Context, key, owner string, f fence) error {
	if !driver.Sleep(ctx, time.Until(f.local)) {
		return fmt.Errorf("undo: %w", ctx.Err())
	}
	now, err := d.clock.sample(ctx, d.db, d.sql.now)
	if err != nil {
		return fmt.Errorf("undo: %w", classify(err))
	}
	if now < f.db {
		return fmt.Errorf("undo: the acquisition may still land for %v on the database clock", time.Duration(f.db-now)*time.Microsecond)
	}
	res, err := d.undo.ExecContext(ctx, key, owner)
	if err != nil {
		return fmt.Errorf("undo: %w", classify(err))
	}
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("undo: %w", err)
	}
	if n == 0 {
		return driver.ErrNotHeld
	}
	d.logger.Debug("locker: mysql: gave up a row taken by an acquisition with an unknown outcome", "key", key)
	return nil
}
