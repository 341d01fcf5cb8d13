package zookeeper

import (
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/golocker/locker/internal/storeenv"
)

// TestGrantedSessionTimeout: the session timeout the server granted is read
// from the connection (go-zookeeper does not export it), and the server's
// answer counts, not the request: the test server grants at least two ticks
// (400 ms).
func TestGrantedSessionTimeout(t *testing.T) {
	srv := storeenv.ZooKeeper(t)
	for asked, want := range map[time.Duration]time.Duration{3 * time.Second: 3 * time.Second, 100 * time.Millisecond: 400 * time.Millisecond} {
		conn, _, err := zk.Connect(srv.Addrs(), asked, zk.WithLogInfo(false), zk.WithLogger(nopLogger{}))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		for deadline := time.Now().Add(15 * time.Second); conn.State() != zk.StateHasSession; time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("no ZooKeeper session after 15 s (state %v)", conn.State())
			}
		}
		got, ok := grantedTimeout(conn)
		if !ok || got != want {
			t.Errorf("asked for %v: granted timeout read as %v (%v), want %v", asked, got, ok, want)
		}
	}
}
