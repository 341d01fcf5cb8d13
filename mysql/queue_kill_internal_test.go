package mysql

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestCancelledWaitEndsWithoutKill checks that a wait in line whose ctx
// ended returns soon although its KILL QUERY fails (here: aimed at no
// session): its connection is closed, which also ends the wait on
// MariaDB. It waited for the statement's timeout.
func TestCancelledWaitEndsWithoutKill(t *testing.T) {
	db, ctx := openTestDB(t)
	d := wakeDriver(t, db)
	k, _, _ := freeKey(t, d)
	name := d.notify.name(k)
	// Another session holds the name. It waits for it: freeKey's lock may
	// have had its name taken by the driver's holder goroutine, which gives
	// it up soon after the release (under load, after a while). A name not
	// taken here would be free for the wait below, which would return at
	// once.
	other, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	var got sql.NullInt64
	if err := other.QueryRowContext(ctx, "SELECT GET_LOCK('"+name+"', 20)").Scan(&got); err != nil || got.Int64 != 1 {
		t.Fatalf("the other session did not get the name: %v %v", got, err)
	}
	s, err := d.notify.session(ctx)
	if err != nil || s == nil {
		t.Fatalf("no session: %v", err)
	}
	s.id = 0 // KILL QUERY 0 fails: no such thread
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, _, err := s.lineUp(wctx, name, time.Minute, false, "")
		done <- err
	}()
	start := strings.ReplaceAll(fmt.Sprintf(lineSQL[:len("SELECT IS_FREE_LOCK('%[1]s')")], name), "'", "''")
	// A wait that returns before its ctx ends fails the test at once.
	awaitCountBefore(ctx, t, db, "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE LOCATE('"+start+"', INFO) = 1", done)
	cancel()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("a cancelled wait returned no error")
		}
	case <-ctx.Done():
		t.Fatal("a cancelled wait whose KILL QUERY failed did not return when its ctx ended")
	}
	if d.mariaDB {
		awaitCount(ctx, t, db, "SELECT COUNT(*) = 0 FROM information_schema.PROCESSLIST WHERE LOCATE('"+start+"', INFO) = 1")
	}
}
