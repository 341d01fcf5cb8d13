package mysql

import (
	"context"
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
	// Another session holds the name.
	other, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if _, err := other.ExecContext(ctx, "DO GET_LOCK('"+name+"', 0)"); err != nil {
		t.Fatal(err)
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
	awaitCount(ctx, t, db, "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE LOCATE('"+start+"', INFO) = 1")
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
