package postgres_test

import (
	"testing"

	"github.com/golocker/locker"
	"github.com/golocker/locker/postgres"
)

// TestPurgeKeepsSharedKeys: Purge leaves the row of a key that shared
// holds hold, however long ago it was last granted (renewals change only
// the holders' rows), so that the semaphore's limit still holds.
func TestPurgeKeepsSharedKeys(t *testing.T) {
	l, pool, ctx := sharedLocker(t)
	one, _ := locker.NewSemaphore(l, "k", 1)
	p := movedPermit(ctx, t, one) // a first holder in the key's row renews the row
	defer p.Unlock(ctx)
	// The key's row as an hour of renewals leaves it.
	if _, err := pool.Exec(ctx, `UPDATE "`+postgres.DefaultTable+`" SET update_time = clock_timestamp() - interval '1 hour',`+
		` lock_until = clock_timestamp() - interval '1 hour' WHERE version = $1`, int64(p.Token())); err != nil {
		t.Fatal(err)
	}
	if _, err := postgres.Purge(ctx, pool, "", postgres.MinPurgeIdle); err != nil {
		t.Fatal(err)
	}
	if q, err := one.TryAcquire(ctx); err == nil {
		t.Errorf("a second permit of a semaphore of 1 was granted after Purge (tokens %d, %d)", p.Token(), q.Token())
		_ = q.Unlock(ctx)
	}
}
