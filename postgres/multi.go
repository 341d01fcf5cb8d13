package postgres

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/golocker/locker"
	"github.com/golocker/locker/driver"
)

// maxMultiKeys is the most keys TryAcquireMulti takes in one statement;
// more are taken one by one, so that one statement never holds many rows
// for long.
const maxMultiKeys = 100

// multiAcquireSQL takes every row of a set when each is missing, free or
// expired, and not marked as held by shared holds, with no data, in one
// statement, unless the fence passed: it fails with
// division_by_zero (SQLSTATE 22012), which rolls it back, when it took
// fewer rows than asked. It returns one row per key taken: name, version,
// the database clock (µs since the epoch). Args: keys, owners, label, ttls
// µs (arrays but label), fence µs, the number of keys.
func multiAcquireSQL(table string) string {
	t := quoteIdent(table)
	return "WITH k AS (SELECT * FROM unnest($1::text[], $2::text[], $4::float8[]) AS k(name, owner, ttl))," +
		" a AS (INSERT INTO " + t + " AS l" +
		" (task_name, task_status, version, owner_token, owner_label, lock_until, start_time, update_time)" +
		" SELECT k.name, 'RUNNING', " + micros(dbNow) + ", k.owner, $3::text, " + dbNow + " + k.ttl * interval '1 microsecond', " + dbNow + ", " + dbNow +
		" FROM k WHERE " + beforeFence +
		" ON CONFLICT (task_name) DO UPDATE SET task_status = 'RUNNING', version = l.version + 1," +
		" owner_token = EXCLUDED.owner_token, owner_label = EXCLUDED.owner_label, lock_until = EXCLUDED.lock_until," +
		" start_time = EXCLUDED.start_time, finish_time = NULL, update_time = EXCLUDED.update_time, lock_data = NULL" +
		" WHERE (l.task_status <> 'RUNNING' OR l.lock_until <= " + dbNow + ") AND l.owner_token <> " + sharedOwnerSQL +
		" AND " + beforeFence +
		" RETURNING l.task_name, l.version)," +
		" n AS (SELECT count(*) AS c FROM a)" +
		" SELECT a.task_name, a.version + 0 * (1 / CASE WHEN n.c < $6::bigint THEN 0 ELSE 1 END), " + micros(dbNow) +
		" FROM a, n"
}

// TryAcquireMulti implements driver.MultiAcquirer with one statement: the
// INSERT … ON CONFLICT DO UPDATE of TryAcquire for every key, rolled back
// unless it took them all. A statement rolled back by a serialization
// failure or a deadlock counts as held. When it took nothing, one read
// finds the keys marked as held by shared holds: each is freed when its
// holds all ended, and the statement runs once more; a key with a live
// hold fails the attempt with driver.ErrConflict.
func (d *pgDriver) TryAcquireMulti(ctx context.Context, reqs []driver.Request) ([]driver.Grant, error) {
	if len(reqs) > maxMultiKeys {
		return nil, fmt.Errorf("acquire: %w: %d keys, at most %d in one statement", driver.ErrNotAtomic, len(reqs), maxMultiKeys)
	}
	keys := make([]string, len(reqs))
	owners := make([]string, len(reqs))
	ttls := make([]float64, len(reqs))
	ttl := reqs[0].TTL
	idx := make(map[string]int, len(reqs))
	for i, req := range reqs {
		if strings.ContainsRune(req.Key, 0) {
			return nil, fmt.Errorf("%w: the key contains a NUL byte, which PostgreSQL text refuses", locker.ErrInvalidKey)
		}
		// A token of this statement's own, as TryAcquire stores.
		keys[i], owners[i], ttls[i] = req.Key, fmt.Sprintf("%s.%016x", req.Owner, rand.Uint64()), float64(ttlMicros(req.TTL))
		idx[req.Key] = i
		ttl = min(ttl, req.TTL)
	}
	label := d.label
	if l := reqs[0].Label; l != "" && l != label {
		label = cleanLabel(l)
	}
	for settled := false; ; settled = true {
		grants, err := d.tryMulti(ctx, reqs, keys, owners, ttls, idx, label, ttl)
		if !errors.Is(err, driver.ErrHeld) {
			return grants, err
		}
		// The statement takes no row marked as held by shared holds: a
		// key whose last holder crashed, or whose last release skipped
		// its row, is freed first, as TryAcquire does.
		marked, merr := d.markedShared(ctx, keys)
		switch {
		case merr != nil:
			return nil, fmt.Errorf("acquire: %w", merr)
		case len(marked) == 0:
			return nil, err
		case settled:
			return nil, fmt.Errorf("%w: the key %q is held by shared holds (a semaphore or a read-write lock), not a plain lock", driver.ErrConflict, marked[0])
		}
		for _, key := range marked {
			free, serr := d.settleShared(ctx, key)
			if serr != nil {
				return nil, fmt.Errorf("acquire: %w", serr)
			}
			if !free {
				return nil, fmt.Errorf("%w: the key %q is held by shared holds (a semaphore or a read-write lock), not a plain lock", driver.ErrConflict, key)
			}
		}
	}
}

// markedSharedSQL reads which of a set of keys have their row marked as
// held by shared holds. Args: keys.
func markedSharedSQL(table string) string {
	return "SELECT task_name FROM " + quoteIdent(table) + " WHERE task_name = ANY($1::text[]) AND task_status = 'RUNNING'" +
		" AND owner_token = " + sharedOwnerSQL + " ORDER BY task_name"
}

// markedShared returns which of keys have their row marked as held by
// shared holds, live or not.
func (d *pgDriver) markedShared(ctx context.Context, keys []string) ([]string, error) {
	var marked []string
	err := d.q.query(ctx, markedSharedSQL(d.cfg.Table), []any{keys}, func(scan func(...any) error) error {
		var key string
		if err := scan(&key); err != nil {
			return err
		}
		marked = append(marked, key)
		return nil
	})
	return marked, classify(err)
}

// tryMulti is one statement of TryAcquireMulti.
func (d *pgDriver) tryMulti(ctx context.Context, reqs []driver.Request, keys, owners []string, ttls []float64, idx map[string]int, label string, ttl time.Duration) ([]driver.Grant, error) {
	sent := time.Now()
	f := d.clock.Fence(ctx, sent, ttl)
	grants := make([]driver.Grant, len(reqs))
	got := 0
	var now int64
	err := d.q.query(ctx, multiAcquireSQL(d.cfg.Table), []any{keys, owners, label, ttls, f.Store, int64(len(reqs))},
		func(scan func(...any) error) error {
			var name string
			var version int64
			if err := scan(&name, &version, &now); err != nil {
				return err
			}
			i, ok := idx[name]
			if !ok {
				return fmt.Errorf("acquire: a row for key %q, which was not asked", name)
			}
			grants[i] = driver.Grant{
				Token: uint64(version), Validity: reqs[i].TTL, Since: sent,
				State: &lockState{table: d.cfg.Table, key: name, owner: owners[i], version: version},
			}
			got++
			return nil
		})
	if err == nil && now > 0 {
		d.clock.Observe(now, sent, time.Since(sent))
	}
	var pe *pgconn.PgError
	switch {
	case errors.As(err, &pe) && pe.Code == "22012", retryable(err):
		return nil, driver.Held(0) // rolled back: nothing taken
	case err != nil:
		err = classify(fmt.Errorf("acquire: %w", err))
		if !definite(err) {
			return nil, d.undoMulti(ctx, keys, owners, ttl, f, err)
		}
		return nil, err
	case got == 0:
		return nil, driver.Held(0) // no row taken: the statement took nothing
	case got != len(reqs):
		return nil, d.undoMulti(ctx, keys, owners, ttl, f, fmt.Errorf("acquire: %d rows for %d keys", got, len(reqs)))
	}
	return grants, nil
}

// undoMulti frees every row owners may hold after a statement whose outcome
// is unknown, once the fence f has passed, and returns cause; wrapped in a
// driver.Residue that tries again when the database could not be reached.
func (d *pgDriver) undoMulti(ctx context.Context, keys, owners []string, ttl time.Duration, f driver.Fence, cause error) error {
	out := func(ctx context.Context) error {
		var errs []error
		for i, key := range keys {
			if err := d.undoAcquire(ctx, key, owners[i], f); err != nil && !errors.Is(err, driver.ErrNotHeld) {
				errs = append(errs, err)
			}
		}
		return errors.Join(errs...)
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), min(ttl, 5*time.Second))
	defer cancel()
	if err := out(cctx); err != nil {
		return &driver.Residue{Err: cause, Cleanup: out}
	}
	return cause
}
