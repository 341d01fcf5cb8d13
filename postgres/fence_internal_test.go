package postgres

import (
	"context"
	"crypto/rand"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/golocker/locker/driver"
	"github.com/golocker/locker/internal/storeenv"
)

// cancelAfter is a querier that ends a ctx once the real statement
// returned: the caller left (or Close cut the call short) while the answer
// was on its way.
type cancelAfter struct {
	querier
	cancel context.CancelFunc
}

func (q cancelAfter) query(ctx context.Context, sql string, args []any, row func(scan func(dest ...any) error) error) error {
	err := q.querier.query(ctx, sql, args, row)
	q.cancel()
	return err
}

func (q cancelAfter) listen(ctx context.Context, use func(*pgx.Conn) error) error {
	return q.querier.listen(ctx, use)
}

// TestFencedOutAfterCtxEnded: an acquiring statement that arrived after its
// fence took nothing; when the caller's ctx ended meanwhile, TryAcquire
// says so with ctx's error, never that the key is held (a Close racing a
// TryLock of a free key then reported "held by another owner").
func TestFencedOutAfterCtxEnded(t *testing.T) {
	url := storeenv.Postgres(t).Addr()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	const table = "fence_internal_locks"
	if err := migrate(ctx, newPoolQuerier(pool), table, createTableSQL(table)); err != nil {
		t.Fatal(err)
	}
	callCtx, endCall := context.WithCancel(ctx)
	defer endCall()
	d := &pgDriver{q: cancelAfter{newPoolQuerier(pool), endCall}, cfg: Config{Table: table}, sql: newStatements(table)}
	// A clock mapping an hour behind the database's: every fence has
	// passed when the statement arrives.
	d.clock.Observe(time.Now().Add(-time.Hour).UnixMicro(), time.Now(), 0)
	_, err = d.TryAcquire(callCtx, driver.Request{Key: "fenced-" + rand.Text(), Owner: rand.Text(), TTL: 10 * time.Second})
	if errors.Is(err, driver.ErrHeld) || !errors.Is(err, context.Canceled) {
		t.Errorf("TryAcquire of a free key, fenced out, its ctx ended meanwhile = %v; want context.Canceled, not a holder", err)
	}
}
