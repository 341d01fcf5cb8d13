package zookeeper

import (
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/golocker/locker/internal/storeenv"
)

// TestOwnedConnectionReadsAPacketInOneCall: a connection Open makes reads a
// reply's length and body in one system call, where go-zookeeper's reads
// on a bare connection take two: sequential requests cost it at least one
// read system call less each than on a connection of go-zookeeper's
// default dialer (counted from /proc/self/io, the runtime's own reads
// included on both).
func TestOwnedConnectionReadsAPacketInOneCall(t *testing.T) {
	if readCalls(t) < 0 {
		t.Skip("no /proc/self/io")
	}
	srv := storeenv.ZooKeeper(t)
	owned, _, err := connectOwned(srv.Addrs(), 3*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer owned.Close()
	bare, _, err := zk.Connect(srv.Addrs(), 3*time.Second, zk.WithLogger(discardLogger{}))
	if err != nil {
		t.Fatal(err)
	}
	defer bare.Close()
	const n = 300
	perRequest := func(conn *zk.Conn) float64 {
		if _, _, err := conn.Exists("/"); err != nil { // the session is up
			t.Fatal(err)
		}
		before := readCalls(t)
		for range n {
			if _, _, err := conn.Exists("/"); err != nil {
				t.Fatal(err)
			}
		}
		return float64(readCalls(t)-before) / n
	}
	o, b := perRequest(owned), perRequest(bare)
	t.Logf("read system calls per request: %.2f owned, %.2f bare", o, b)
	if o > b-0.8 {
		t.Errorf("%.2f read system calls per request on a connection of a Locker's own, %.2f on a bare one; want one less (a packet's length and body in one read)", o, b)
	}
}

// readCalls is this process's count of read system calls so far, or -1
// without /proc/self/io.
func readCalls(t *testing.T) int64 {
	data, err := os.ReadFile("/proc/self/io")
	if err != nil {
		return -1
	}
	for line := range strings.Lines(string(data)) {
		if v, ok := strings.CutPrefix(line, "syscr: "); ok {
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatal("/proc/self/io has no syscr")
	return -1
}
