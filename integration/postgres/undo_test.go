package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/golocker/locker"
	"github.com/golocker/locker/driver"
	"github.com/golocker/locker/internal/testenv"
	"github.com/golocker/locker/postgres"
)

// slowLabel is the owner label whose acquisitions the trigger of
// TestUndoWaitsForInFlightAcquire holds up before they commit.
const slowLabel = "slow-undo"

// TestUndoWaitsForInFlightAcquire: an acquiring statement passes its fence,
// writes the row, and is held up before it commits (an AFTER trigger
// sleeps) while its connection is reset. The undo of its unknown outcome
// runs once the fence has passed, before the commit. It must wait for the
// statement and free the row it took, for a missing row (an INSERT, which
// no UPDATE sees before its commit) as for a free one (an UPDATE). Without
// that the key stays held for nobody until its TTL, which here is a minute.
func TestUndoWaitsForInFlightAcquire(t *testing.T) {
	srv := testenv.Postgres(t)
	const table, ttl = "undo_race_locks", time.Minute
	admin := openPool(t, srv.URL())
	cfg := postgres.Config{Table: table, PollOnly: true}
	other, err := postgres.NewWithConfig(admin, cfg, locker.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	// The fence window of a one-minute TTL is 2 s: the trigger outlasts it.
	for _, stmt := range []string{
		// It sleeps 4 s from the statement's start, ignoring the cancel
		// request pgx sends when it drops the connection.
		`CREATE OR REPLACE FUNCTION undo_race_sleep() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			WHILE clock_timestamp() < statement_timestamp() + interval '4 seconds' LOOP
				BEGIN
					PERFORM pg_sleep(0.1);
				EXCEPTION WHEN query_canceled THEN NULL;
				END;
			END LOOP;
			RETURN NULL;
		END $$`,
		`DROP TRIGGER IF EXISTS undo_race ON "` + table + `"`,
		`CREATE TRIGGER undo_race AFTER INSERT OR UPDATE ON "` + table + `" FOR EACH ROW` +
			` WHEN (NEW.owner_label = '` + slowLabel + `' AND NEW.task_status = 'RUNNING') EXECUTE FUNCTION undo_race_sleep()`,
	} {
		if _, err := admin.Exec(ctx, stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	for _, existing := range []bool{false, true} {
		t.Run(fmt.Sprintf("existing=%v", existing), func(t *testing.T) {
			key := freshKey(t)
			if existing {
				lk, err := other.TryLock(ctx, key)
				if err != nil {
					t.Fatal(err)
				}
				if err := lk.Unlock(ctx); err != nil {
					t.Fatal(err)
				}
			}
			p := testenv.NewProxy(t, hostOf(t, srv.URL()))
			url, err := testenv.WithHost(srv.URL(), p.Addr())
			if err != nil {
				t.Fatal(err)
			}
			slow, err := postgres.NewWithConfig(openPool(t, url), cfg, locker.WithTTL(ttl), locker.WithOwnerLabel(slowLabel))
			if err != nil {
				t.Fatal(err)
			}
			defer slow.Close()
			got := make(chan error, 1)
			go func() {
				lk, err := slow.TryLock(ctx, key)
				if err == nil {
					err = fmt.Errorf("TryLock got the key (token %d) through a reset connection", lk.Token())
				}
				got <- err
			}()
			// The statement is in the trigger: written, not committed.
			for n := 0; n == 0; {
				err := admin.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'PgSleep' AND query LIKE $1",
					`%INSERT INTO "`+table+`"%`).Scan(&n)
				if err != nil {
					t.Fatal(err)
				}
				if !driver.Sleep(ctx, 10*time.Millisecond) {
					t.Fatal("the acquiring statement never reached the trigger")
				}
			}
			reset := time.Now()
			p.Reset()
			if err := <-got; err == nil || errors.Is(err, locker.ErrNotAcquired) {
				t.Fatalf("TryLock whose connection was reset mid-statement: got %v, want an error of unknown outcome", err)
			}
			t.Logf("TryLock returned %v after the reset", time.Since(reset))
			// pgx sends a cancel request on a new connection as it drops
			// one: let the reset refuse it. The undo waits for the 2 s
			// fence anyway.
			driver.Sleep(ctx, 500*time.Millisecond)
			p.Heal()
			start := time.Now()
			for {
				lk, err := other.TryLock(ctx, key)
				if err == nil {
					t.Logf("the key was free %v after the reset", time.Since(start).Round(time.Millisecond))
					_ = lk.Unlock(ctx)
					return
				}
				if !errors.Is(err, locker.ErrNotAcquired) {
					t.Fatal(err)
				}
				if time.Since(start) > 20*time.Second {
					st, _ := locker.Inspect(ctx, other, key)
					t.Fatalf("the key is still held %v after the acquisition was reset (holder %q, expires %v): its undo ran before the statement committed, and missed it",
						time.Since(start).Round(time.Millisecond), st.Label, st.Expires)
				}
				driver.Sleep(ctx, 100*time.Millisecond)
			}
		})
	}
}
