package zookeeper_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/golocker/locker"
	"github.com/golocker/locker/internal/rerun"
	"github.com/golocker/locker/internal/testenv"
	"github.com/golocker/locker/zookeeper"
)

// connectWith connects to srv asking for a session of timeout and waits for
// the session.
func connectWith(t testing.TB, srv *testenv.ZooKeeperServer, timeout time.Duration) (*zk.Conn, <-chan zk.Event) {
	t.Helper()
	conn, events, err := zk.Connect(srv.Servers(), timeout, zk.WithLogger(quietLogger{}), zk.WithLogInfo(false))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Close)
	waitSession(t, conn)
	return conn, events
}

// TestNewRefusesSessionShorterThanTTL: a session the server granted for
// less than the TTL would let another process in while the holder still
// counts on its lock: New refuses it and names both durations.
func TestNewRefusesSessionShorterThanTTL(t *testing.T) {
	srv := testenv.ZooKeeper(t)
	conn, events := connectWith(t, srv, time.Second)
	l, err := zookeeper.New(conn, events, locker.WithTTL(3*time.Second))
	if err == nil {
		_ = l.Close()
		t.Fatal("New with a TTL of 3s on a session granted 1s must fail")
	}
	if !errors.Is(err, locker.ErrInvalidOption) || !strings.Contains(err.Error(), "1s") || !strings.Contains(err.Error(), "3s") {
		t.Errorf("New = %v; want ErrInvalidOption naming the granted 1s and the TTL 3s", err)
	}
}

// TestSessionLongerThanTTL: a server whose minimum session timeout is above
// the session the client asks for grants more than asked, and more than the
// TTL: New accepts it, and renewals keep the lock over several TTLs. The
// server is one of the test's own with a tick of 2 s (sessions of 4 s at
// least): a session of the test server's minimum, 400 ms, timed out on a
// loaded machine and closed the connection. A round in which the lock was
// lost only because no renewal came back in time (rerun.StarvedLoss) says
// nothing, and runs again, up to three rounds; any other loss (a session
// taken for ended, a renewal refused) fails at once.
func TestSessionLongerThanTTL(t *testing.T) {
	srv := testenv.NewZooKeeperProduction(t)
	conn, events := connectWith(t, srv, 100*time.Millisecond) // granted 4 s
	l, err := zookeeper.New(conn, events, locker.WithTTL(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx := t.Context()
	rerun.Starved(t, 3, func(i int) error {
		lk, err := l.TryLock(ctx, fmt.Sprintf("%s-%d", t.Name(), i))
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(3 * time.Second) // several TTLs: renewals keep it
		return findings(nil).settle(ctx, t, lk)
	})
}
