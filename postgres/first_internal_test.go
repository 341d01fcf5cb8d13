package postgres

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/golocker/locker/driver"
)

// firstHold takes a permit of a semaphore of 2 on a free key as its first
// holder, in the key's row.
func firstHold(ctx context.Context, t *testing.T, d notifyingDriver, key, owner string) driver.Lease {
	t.Helper()
	g, err := d.TryAcquireShared(ctx, driver.Request{Key: key, Owner: owner, TTL: sharedTTL}, driver.Share{Mode: driver.Permits, Weight: 1, Limit: 2})
	if err != nil {
		t.Fatal(err)
	}
	if s := g.State.(*shareState); !s.first {
		t.Fatal("a permit on a free key was not taken in the key's row")
	}
	return driver.Lease{Key: key, Owner: owner, Token: g.Token, TTL: sharedTTL, State: g.State}
}

// TestFirstHolderFindsItsMove: a first holder's renewal, release or keep
// that waits for its key's row while a second request moves the hold out
// of it finds the hold in the table of shared holds. Its statement on the
// row then matches nothing, and its snapshot predates the moved row.
func TestFirstHolderFindsItsMove(t *testing.T) {
	for _, op := range []struct {
		name, like string
		run        func(context.Context, notifyingDriver, driver.Lease) error
	}{
		{"renewal", "WITH p AS%", func(ctx context.Context, d notifyingDriver, l driver.Lease) error {
			_, errs, err := d.RenewBatch(ctx, []driver.Lease{l})
			if err != nil {
				return err
			}
			return errs[0]
		}},
		{"release", "WITH r AS (UPDATE%", func(ctx context.Context, d notifyingDriver, l driver.Lease) error {
			return d.Release(ctx, l)
		}},
		{"keep", "UPDATE % SET finish_time%", func(ctx context.Context, d notifyingDriver, l driver.Lease) error {
			return d.Keep(ctx, l, sharedTTL)
		}},
	} {
		t.Run(op.name, func(t *testing.T) {
			d, ctx, key := sharedDriver(t)
			pool := d.q.(poolQuerier).p
			l := firstHold(ctx, t, d, key, "first")
			// A second request's batch, held open: it locked the row and
			// moved the hold.
			tx, err := pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
			for _, stmt := range []string{d.shared.lockKey, d.first.move} {
				if _, err := tx.Exec(ctx, stmt, key); err != nil {
					t.Fatal(err)
				}
			}
			res := make(chan error, 1)
			returned := make(chan struct{})
			go func() {
				defer close(returned)
				res <- op.run(ctx, d, l)
			}()
			awaitRowWait(ctx, t, pool, op.name, op.like, returned)
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			if err := <-res; err != nil {
				t.Fatalf("the %s of a first holder moved meanwhile: %v", op.name, err)
			}
			if !l.State.(*shareState).moved.Load() {
				t.Errorf("the %s did not note the move", op.name)
			}
			st, err := d.Inspect(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			if held := op.name != "release"; st.Held != held || held && (len(st.Holders) != 1 || st.Holders[0].Token != l.Token || st.Limit != 2) {
				t.Errorf("Inspect after the %s: %+v; want held %v by the hold (token %d, limit 2)", op.name, st, held, l.Token)
			}
		})
	}
}

// oldQuickSQL is the first attempt of the version before first holders:
// it marks the key's row as held by shared holds and records the holder in
// the table of shared holds. Args as firstStatements.take.
func oldQuickSQL(table string) string {
	t, st := quoteIdent(table), quoteIdent(table+sharedSuffix)
	return "WITH k AS (INSERT INTO " + t + " AS l" +
		" (task_name, task_status, version, owner_token, owner_label, lock_until, start_time, update_time)" +
		" SELECT $1::text, 'RUNNING', " + micros(dbNow) + ", " + sharedOwnerSQL + ", '" + sharedLabel + "', " + untilAt("$4") + ", " + dbNow + ", " + dbNow +
		" WHERE " + fenceAt("$5") +
		" ON CONFLICT (task_name) DO UPDATE SET task_status = 'RUNNING', version = l.version + 1," +
		" owner_token = EXCLUDED.owner_token, owner_label = EXCLUDED.owner_label, lock_until = EXCLUDED.lock_until," +
		" start_time = EXCLUDED.start_time, finish_time = NULL, update_time = EXCLUDED.update_time" +
		" WHERE (l.task_status <> 'RUNNING' OR l.lock_until <= " + dbNow + " AND l.owner_token <> " + sharedOwnerSQL + ")" +
		" AND " + fenceAt("$5") + " RETURNING l.version)," +
		" h AS (" + holderInsert(st, "k.version", "0") + ")" +
		" SELECT version FROM k"
}

// TestFirstHolderBesideOldVersion: Lockers of the version before first
// holders and of this one on one table. This version's attempts count an
// old version's holds; an old version's attempts, which decide with the
// same claim but move nothing, find a first holder's row a plain lock's,
// and refuse with a conflict; its plain acquisition does not take it.
func TestFirstHolderBesideOldVersion(t *testing.T) {
	share := driver.Share{Mode: driver.Permits, Weight: 1, Limit: 2}
	fence := time.Now().Add(time.Hour).UnixMicro()
	t.Run("old holder", func(t *testing.T) {
		d, ctx, key := sharedDriver(t)
		var old int64
		if err := d.q.query(ctx, oldQuickSQL(DefaultTable), []any{key, "old", "old", ttlMicros(sharedTTL), fence, int16(share.Mode), share.Weight, share.Limit},
			func(scan func(...any) error) error { return scan(&old) }); err != nil {
			t.Fatal(err)
		}
		g, err := d.TryAcquireShared(ctx, driver.Request{Key: key, Owner: "new", TTL: sharedTTL}, share)
		if err != nil {
			t.Fatalf("a permit beside an old version's: %v", err)
		}
		if g.Token <= uint64(old) || g.State.(*shareState).first {
			t.Errorf("the permit beside an old version's: token %d (old %d), in the key's row %v", g.Token, old, g.State.(*shareState).first)
		}
		if _, err := d.TryAcquireShared(ctx, driver.Request{Key: key, Owner: "third", TTL: sharedTTL}, share); !errors.Is(err, driver.ErrHeld) {
			t.Errorf("a third permit of 2 beside an old version's: %v, want held", err)
		}
	})
	t.Run("new holder", func(t *testing.T) {
		d, ctx, key := sharedDriver(t)
		firstHold(ctx, t, d, key, "new")
		found := false
		if err := d.q.query(ctx, oldQuickSQL(DefaultTable), []any{key, "old", "old", ttlMicros(sharedTTL), fence, int16(share.Mode), share.Weight, share.Limit},
			func(scan func(...any) error) error { found = true; return nil }); err != nil || found {
			t.Errorf("an old version's first attempt on a first holder's key: took it %v, %v", found, err)
		}
		var plain, fits, lined bool
		var badMode, badLimit, version, next any
		if err := d.q.batch(ctx, []stmt{
			{d.shared.insertKey, []any{key}},
			{d.shared.lockKey, []any{key}},
			{d.shared.claim, []any{key, "old", "old", ttlMicros(sharedTTL), fence, int16(share.Mode), share.Weight, share.Limit, true}},
		}, func(scan func(...any) error) error {
			return scan(&plain, &badMode, &badLimit, &fits, &lined, &version, &next)
		}); err != nil {
			t.Fatal(err)
		}
		if !plain || version != nil {
			t.Errorf("an old version's shared attempt on a first holder's key: plain %v, version %v; want a plain lock's key, not taken", plain, version)
		}
		var taken any
		if err := d.q.query(ctx, d.sql.acquire, []any{key, "plain", "plain", ttlMicros(sharedTTL), fence, nil},
			func(scan func(...any) error) error { return scan(&taken, nil, nil, nil) }); err != nil {
			t.Fatal(err)
		}
		if taken != nil {
			t.Errorf("a plain acquisition took a first holder's key (version %v)", taken)
		}
	})
}

// TestFirstHolderUndo: the cleanup after a shared attempt whose outcome is
// unknown frees the key's row that the attempt took as its first holder,
// and the hold that a later request moved.
func TestFirstHolderUndo(t *testing.T) {
	for _, moved := range []bool{false, true} {
		d, ctx, key := sharedDriver(t)
		l := firstHold(ctx, t, d, key, "first")
		if moved {
			if _, err := d.TryAcquireShared(ctx, driver.Request{Key: key, Owner: "second", TTL: sharedTTL}, driver.Share{Mode: driver.Permits, Weight: 1, Limit: 1}); !errors.Is(err, driver.ErrConflict) {
				t.Fatalf("a request of another limit: %v, want a conflict (its batch moves the hold all the same)", err)
			}
		}
		if err := d.undoShare(ctx, key, l.Owner); err != nil {
			t.Fatalf("undo (moved %v): %v", moved, err)
		}
		if st, err := d.Inspect(ctx, key); err != nil || st.Held {
			t.Errorf("Inspect after the undo (moved %v): %+v, %v; want the key free", moved, st, err)
		}
	}
}
