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
// expired, with no data, in one statement, unless the fence passed: it
// fails with division_by_zero (SQLSTATE 22012), which rolls it back, when
// it took fewer rows than asked because a row was held in its snapshot,
// and with numeric_value_out_of_range (22003) when none was: a row
// changed while the statement waited for it. A statement that took no row
// for that reason, or because it reached the database after its fence,
// returns the key "" instead: either way nobody held a key in its
// snapshot, and the caller's next statement, with a fresh fence, may take
// them. It takes nothing when a key's row is marked as held by shared
// holds in its snapshot, or a live first holder holds it (first.go), and
// returns those keys instead. With settle, it frees such rows whose holds all ended and takes
// them (see settling), and it returns instead the keys it saw live shared
// holds or waiters on, first holders included. It returns one row per key: name, version (0 for a
// key returned instead), the database clock (µs since the epoch), and
// whether the key was returned instead. Args: keys, owners, label, ttls µs
// (arrays but label), fence µs, the number of keys.
func multiAcquireSQL(table string, settle bool) string {
	t := quoteIdent(table)
	// marked lists the keys that make the statement take nothing; take is
	// the condition on a row that exists.
	ctes := "v AS MATERIALIZED (SELECT task_name FROM " + t + " WHERE task_name = ANY($1::text[]) AND (owner_token = " + sharedOwnerSQL + " OR " + firstLive("") + ")),"
	marked := "v"
	take := "(l.task_status <> 'RUNNING' OR l.lock_until <= " + dbNow + ") AND l.owner_token <> " + sharedOwnerSQL
	if settle {
		ctes = settling(t, quoteIdent(table+sharedSuffix), "= ANY($1::text[])") + "," +
			" m AS (SELECT o.task_name FROM o JOIN v USING (task_name) WHERE o.live" +
			" UNION SELECT task_name FROM " + t + " WHERE task_name = ANY($1::text[]) AND " + firstLive("") + "),"
		marked = "m"
		take = "(" + take + " OR " + settled("l") + ")"
	}
	// held is true when a key's row was held in the statement's
	// snapshot: the reason, then, that the statement took fewer rows than
	// asked. Evaluated only after it did.
	held := "EXISTS (SELECT 1 FROM " + t + " WHERE task_name = ANY($1::text[]) AND task_status = 'RUNNING' AND lock_until > " + dbNow + ")"
	return "WITH " + ctes +
		" k AS (SELECT * FROM unnest($1::text[], $2::text[], $4::float8[]) AS k(name, owner, ttl))," +
		" a AS (INSERT INTO " + t + " AS l" +
		" (task_name, task_status, version, owner_token, owner_label, lock_until, start_time, update_time)" +
		" SELECT k.name, 'RUNNING', " + micros(dbNow) + ", k.owner, $3::text, " + dbNow + " + k.ttl * interval '1 microsecond', " + dbNow + ", " + dbNow +
		" FROM k WHERE " + beforeFence + " AND NOT EXISTS (SELECT 1 FROM " + marked + ")" +
		" ON CONFLICT (task_name) DO UPDATE SET task_status = 'RUNNING', version = l.version + 1," +
		" owner_token = EXCLUDED.owner_token, owner_label = EXCLUDED.owner_label, lock_until = EXCLUDED.lock_until," +
		" start_time = EXCLUDED.start_time, finish_time = NULL, update_time = EXCLUDED.update_time, lock_data = NULL" +
		" WHERE " + take + " AND " + beforeFence +
		" RETURNING l.task_name, l.version)," +
		" n AS (SELECT count(*) AS c FROM a)" +
		" SELECT a.task_name, a.version + 0 * CASE WHEN n.c >= $6::bigint THEN 0 WHEN " + held + " THEN 1 / (n.c - n.c)" +
		" ELSE 9223372036854775807 + n.c END, " + micros(dbNow) + ", false" +
		" FROM a, n" +
		" UNION ALL SELECT task_name, 0, " + micros(dbNow) + ", true FROM " + marked +
		" UNION ALL SELECT '', 0, " + micros(dbNow) + ", true FROM n" +
		" WHERE n.c = 0 AND NOT EXISTS (SELECT 1 FROM " + marked + ") AND NOT " + held
}

// TryAcquireMulti implements driver.MultiAcquirer with one statement: the
// INSERT … ON CONFLICT DO UPDATE of TryAcquire for every key, rolled back
// unless it took them all. A statement rolled back by a serialization
// failure or a deadlock counts as held. A key whose row is marked as held
// by shared holds costs one statement more, which frees the row and takes
// the keys when the key's holds all ended; a key with a live hold or
// waiter fails the attempt with driver.ErrConflict.
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
	grants, marked, err := d.tryMulti(ctx, false, reqs, keys, owners, ttls, idx, label, ttl)
	if len(marked) == 0 && !errors.Is(err, errChanged) {
		return grants, err
	}
	// A key whose last holder crashed, or whose last release skipped its
	// row, is freed and taken by the settling statement, as TryAcquire
	// does with settleTake. A row that changed while the statement waited
	// for it may have been marked meanwhile: the settling statement sees
	// it.
	if err := d.checkShared(); err != nil {
		return nil, fmt.Errorf("acquire: %w", err)
	}
	grants, live, err := d.tryMulti(ctx, true, reqs, keys, owners, ttls, idx, label, ttl)
	if len(live) > 0 {
		return nil, fmt.Errorf("%w: the key %q is held by shared holds (a semaphore or a read-write lock), not a plain lock", driver.ErrConflict, live[0])
	}
	return grants, err
}

// errChanged is tryMulti's refusal when a row changed while the
// statement waited for it, or when the statement reached the database
// after its fence, and nobody held a key in its snapshot.
var errChanged = fmt.Errorf("%w: a key's row changed while the statement waited for it", driver.ErrHeld)

// tryMulti is one statement of TryAcquireMulti, settling or not (see
// multiAcquireSQL). It returns the grants, or the keys the statement
// returned instead of taking any, with driver.ErrHeld (errChanged when a
// row changed while the statement waited for it).
func (d *pgDriver) tryMulti(ctx context.Context, settle bool, reqs []driver.Request, keys, owners []string, ttls []float64, idx map[string]int, label string, ttl time.Duration) ([]driver.Grant, []string, error) {
	sent := time.Now()
	f := d.clock.Fence(ctx, sent, ttl)
	grants := make([]driver.Grant, len(reqs))
	got := 0
	var marked []string
	var now int64
	changed := false
	err := d.q.query(ctx, multiAcquireSQL(d.cfg.Table, settle), []any{keys, owners, label, ttls, f.Store, int64(len(reqs))},
		func(scan func(...any) error) error {
			var name string
			var version int64
			var instead bool
			if err := scan(&name, &version, &now, &instead); err != nil {
				return err
			}
			if instead && name == "" {
				changed = true
				return nil
			}
			i, ok := idx[name]
			if !ok {
				return fmt.Errorf("acquire: a row for key %q, which was not asked", name)
			}
			if instead {
				marked = append(marked, name)
				return nil
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
	case errors.As(err, &pe) && pe.Code == "22003":
		return nil, nil, errChanged // rolled back: nothing taken
	case errors.As(err, &pe) && pe.Code == "22012", retryable(err):
		return nil, nil, driver.Held(0) // rolled back: nothing taken
	case err != nil:
		err = classify(fmt.Errorf("acquire: %w", err))
		if !definite(err) {
			return nil, nil, d.undoMulti(ctx, keys, owners, ttl, f, err)
		}
		return nil, nil, err
	case got == 0 && changed:
		return nil, nil, errChanged
	case got == 0:
		return nil, marked, driver.Held(0) // no row taken: the statement took nothing
	case got != len(reqs) || len(marked) > 0:
		return nil, nil, d.undoMulti(ctx, keys, owners, ttl, f, fmt.Errorf("acquire: %d rows for %d keys", got, len(reqs)))
	}
	return grants, nil, nil
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
