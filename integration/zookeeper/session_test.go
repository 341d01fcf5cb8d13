package zookeeper_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/golocker/locker"
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
// the TTL grants more than asked: the Locker works, and a crashed holder's
// key is taken over once that longer session expired.
func TestSessionLongerThanTTL(t *testing.T) {
	srv := testenv.ZooKeeper(t)
	conn, events := connectWith(t, srv, 100*time.Millisecond) // granted 400 ms
	// Just under the binary server's 400 ms minimum: at 200 ms, a renewal
	// late on a loaded machine lost the lock.
	l, err := zookeeper.New(conn, events, locker.WithTTL(380*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx := t.Context()
	lk, err := l.TryLock(ctx, t.Name())
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second) // several TTLs: renewals keep it
	select {
	case <-lk.Done():
		t.Fatalf("the lock was lost: %v", lk.Err())
	default:
	}
	if err := lk.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}
