package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/golocker/locker"
	"github.com/golocker/locker/internal/testenv"
	"github.com/golocker/locker/postgres"
)

// stmtCounter is a pgx tracer that records the renewal statements a pool
// sends: how many leases each one carried.
type stmtCounter struct {
	prefix string
	mu     sync.Mutex
	sizes  []int
}

func (c *stmtCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	if !strings.HasPrefix(d.SQL, c.prefix) || len(d.Args) == 0 {
		return ctx
	}
	keys, _ := d.Args[0].([]string)
	c.mu.Lock()
	c.sizes = append(c.sizes, len(keys))
	c.mu.Unlock()
	return ctx
}

func (c *stmtCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// take returns the leases of each renewal statement so far and forgets
// them.
func (c *stmtCounter) take() []int {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.sizes
	c.sizes = nil
	return s
}

// holdMany has one Locker with TTL ttl hold n locks for rounds renewal
// rounds, and returns the number of leases each renewal statement carried
// from the third round on (the first rounds gather the locks taken at
// different moments into one batch).
func holdMany(t testing.TB, n int, ttl time.Duration, rounds int) []int {
	t.Helper()
	srv := testenv.Postgres(t)
	pc, err := pgxpool.ParseConfig(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	const table = "renew_locks"
	rec := &stmtCounter{prefix: `UPDATE "` + table + `" AS l SET lock_until`}
	pc.ConnConfig.Tracer = rec
	pool, err := pgxpool.NewWithConfig(t.Context(), pc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	l, err := postgres.NewWithConfig(pool, postgres.Config{Table: table, PollOnly: true},
		locker.WithTTL(ttl), locker.WithPrefix(fmt.Sprintf("renew%d/", time.Now().UnixNano())))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute+time.Duration(rounds+2)*ttl)
	defer cancel()
	// The locks are taken, and released, by takers at once: one after
	// another, 1,000 of them took most of the test's time.
	locks := make([]locker.Lock, n)
	errs := make([]error, n)
	byTakers(n, func(i int) { locks[i], errs[i] = l.TryLock(ctx, fmt.Sprint("k", i)) })
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	// Two rounds to gather the locks into one batch, then the rounds
	// counted.
	time.Sleep(2 * ttl / 3)
	rec.take()
	time.Sleep(time.Duration(rounds) * ttl / 3)
	sizes := rec.take()
	for _, lk := range locks {
		if lk.Err() != nil {
			t.Fatalf("lock lost while holding: %v", lk.Err())
		}
	}
	byTakers(n, func(i int) { _ = locks[i].Unlock(ctx) })
	return sizes
}

// takers is how many goroutines byTakers runs: the connections of
// pgxpool's default pool on up to four cores.
const takers = 4

// byTakers calls do(i) for every i below n, from takers goroutines.
func byTakers(n int, do func(i int)) {
	var wg sync.WaitGroup
	for w := range takers {
		wg.Go(func() {
			for i := w; i < n; i += takers {
				do(i)
			}
		})
	}
	wg.Wait()
}

// TestRenewalOneStatementPerTick: a Locker holding 1,000 locks renews them
// all in one statement per renewal round, once the first rounds gathered
// the locks taken at different moments.
func TestRenewalOneStatementPerTick(t *testing.T) {
	const n = 1000
	sizes := holdMany(t, n, 6*time.Second, 3)
	t.Logf("leases per renewal statement: %v", sizes)
	if len(sizes) == 0 {
		t.Fatal("no renewal statement in three renewal intervals")
	}
	for _, s := range sizes {
		if s != n {
			t.Errorf("a renewal statement carried %d of the %d held leases; want every lease in one statement per round (all: %v)", s, n, sizes)
			break
		}
	}
}

// BenchmarkRenew1000 reports the renewal statements of a Locker holding
// 1,000 locks over three renewal rounds, and the leases each carried
// (run with -bench=Renew1000).
func BenchmarkRenew1000(b *testing.B) {
	const n = 1000
	sizes := holdMany(b, n, 6*time.Second, 3)
	total := 0
	for _, s := range sizes {
		total += s
	}
	b.ReportMetric(float64(len(sizes)), "renew-stmts/3-rounds")
	b.ReportMetric(float64(total)/float64(max(len(sizes), 1)), "leases/stmt")
	b.ReportMetric(0, "ns/op") // it runs once whatever b.N
}
