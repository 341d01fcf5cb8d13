package zookeeper_test

import (
	"testing"

	"github.com/golocker/locker"
	"github.com/golocker/locker/internal/testenv"
)

// multiRequestRounds is how many holds BenchmarkMultiRequests takes of
// each kind.
const multiRequestRounds = 200

// BenchmarkMultiRequests counts the requests the server receives per
// uncontended LockMulti of three keys with its Unlock, and per Lock of one
// key with its Unlock, on one session, and their ratio multi-x-lock; and
// per LockMulti with its Unlock of two Lockers taking the three keys in
// turn (multi-alternate-requests). A count, not a time (pings and hold
// watches add a little). It runs once whatever b.N.
func BenchmarkMultiRequests(b *testing.B) {
	addr := testenv.ZooKeeper(b).Servers()[0]
	l := benchLocker(b, addr)
	key := uniqueKey(b)
	count := func(hold func() error) float64 {
		if err := hold(); err != nil { // create the keys' nodes
			b.Fatal(err)
		}
		before := packetsReceived(b, addr)
		for range multiRequestRounds {
			if err := hold(); err != nil {
				b.Fatal(err)
			}
		}
		return float64(packetsReceived(b, addr)-before) / multiRequestRounds
	}
	lock := count(func() error {
		lk, err := l.Lock(b.Context(), key+"/lock")
		if err != nil {
			return err
		}
		return lk.Unlock(b.Context())
	})
	keys := []string{key + "/a", key + "/b", key + "/c"}
	multi := count(func() error {
		m, err := locker.LockMulti(b.Context(), l, keys)
		if err != nil {
			return err
		}
		return m.Unlock(b.Context())
	})
	// Two Lockers in turn: neither finds the keys as it left them.
	other := benchLocker(b, addr)
	turn := 0
	alternate := count(func() error {
		turn++
		m, err := locker.LockMulti(b.Context(), []locker.Locker{l, other}[turn%2], keys)
		if err != nil {
			return err
		}
		return m.Unlock(b.Context())
	})
	b.ReportMetric(lock, "lock-requests")
	b.ReportMetric(multi, "multi-requests")
	b.ReportMetric(multi/lock, "multi-x-lock")
	b.ReportMetric(alternate, "multi-alternate-requests")
	b.ReportMetric(0, "ns/op")
}
