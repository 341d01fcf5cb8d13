package mysql

import (
	"crypto/rand"
	"errors"
	"testing"
	"time"

	"github.com/golocker/locker/driver"
)

// TestReleaseMulti checks that ReleaseMulti gives each lease the outcome
// Release would: all released in one statement, a lease broken behind
// its holder's back, and a lease whose row was deleted.
func TestReleaseMulti(t *testing.T) {
	db, ctx := openTestDB(t)
	d := pollDriver(t, ctx, db, DefaultTable, 10*time.Second)
	prefix := t.Name() + "-" + rand.Text()[:8] + "/"
	keys := []string{prefix + "a", prefix + "b", prefix + "c"}
	take := func() []driver.Lease {
		t.Helper()
		reqs := make([]driver.Request, len(keys))
		for i, k := range keys {
			reqs[i] = driver.Request{Key: k, Owner: rand.Text(), TTL: 10 * time.Second}
		}
		gs, err := d.TryAcquireMulti(ctx, reqs)
		if err != nil {
			t.Fatalf("TryAcquireMulti: %v", err)
		}
		ls := make([]driver.Lease, len(gs))
		for i, g := range gs {
			ls[i] = driver.Lease{Key: reqs[i].Key, Owner: reqs[i].Owner, Token: g.Token, TTL: reqs[i].TTL, State: g.State}
		}
		return ls
	}
	check := func(what string, ls []driver.Lease, notHeld int) {
		t.Helper()
		errs, err := d.ReleaseMulti(ctx, ls)
		if err != nil || len(errs) != len(ls) {
			t.Fatalf("%s: ReleaseMulti: %d results, %v", what, len(errs), err)
		}
		for i, err := range errs {
			if i == notHeld && !errors.Is(err, driver.ErrNotHeld) {
				t.Errorf("%s: the release of %q must report ErrNotHeld, got %v", what, ls[i].Key, err)
			}
			if i != notHeld && err != nil {
				t.Errorf("%s: the release of %q: %v", what, ls[i].Key, err)
			}
		}
	}
	check("all held", take(), -1)

	ls := take()
	if err := d.Break(ctx, keys[1]); err != nil {
		t.Fatal(err)
	}
	check("one broken", ls, 1)

	ls = take()
	if err := d.Break(ctx, keys[0]); err != nil {
		t.Fatal(err)
	}
	other, err := d.TryAcquire(ctx, driver.Request{Key: keys[0], Owner: rand.Text(), TTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	check("one taken by another owner", ls, 0)
	if st, err := d.Inspect(ctx, keys[0]); err != nil || !st.Held || st.Token != other.Token {
		t.Errorf("a release must never free another owner's lock: %+v, %v", st, err)
	}
	if err := d.Break(ctx, keys[0]); err != nil {
		t.Fatal(err)
	}

	ls = take()
	if _, err := db.ExecContext(ctx, "DELETE FROM "+d.sql.table+" WHERE task_name = ?", keys[2]); err != nil {
		t.Fatal(err)
	}
	check("one deleted", ls, 2)

	// Every key is free again: the releases took effect.
	check("taken again", take(), -1)
}
