package zookeeper_test

import (
	"testing"
	"time"

	"github.com/golocker/locker"
	"github.com/golocker/locker/integration/internal/sharedbench"
	"github.com/golocker/locker/internal/testenv"
)

// BenchmarkSharedUncontended: see sharedbench.Uncontended.
func BenchmarkSharedUncontended(b *testing.B) {
	sharedbench.Uncontended(b, benchLocker(b, testenv.ZooKeeper(b).Servers()[0]), uniqueKey(b))
}

// BenchmarkSharedHandoff: see sharedbench.Handoff.
func BenchmarkSharedHandoff(b *testing.B) {
	addr := testenv.ZooKeeper(b).Servers()[0]
	sharedbench.Handoff(b, benchLocker(b, addr), benchLocker(b, addr), uniqueKey(b))
}

// sharedRequestRounds is how many holds BenchmarkSharedRequests takes of
// each kind.
const sharedRequestRounds = 200

// BenchmarkSharedRequests counts the requests the server receives per
// uncontended semaphore permit (Acquire and Unlock) and per uncontended
// lock (Lock and Unlock), on one session, and their ratio permit-x-lock.
// A count, not a time (pings add a little). It runs once whatever b.N.
func BenchmarkSharedRequests(b *testing.B) {
	addr := testenv.ZooKeeper(b).Servers()[0]
	l := benchLocker(b, addr)
	key := uniqueKey(b)
	sem, err := locker.NewSemaphore(l, key+"/sem", 4)
	if err != nil {
		b.Fatal(err)
	}
	count := func(acquire func() (locker.Lock, error)) float64 {
		hold := func() {
			lk, err := acquire()
			if err != nil {
				b.Fatal(err)
			}
			if err := lk.Unlock(b.Context()); err != nil {
				b.Fatal(err)
			}
		}
		hold() // create the key's parents
		before := packetsReceived(b, addr)
		for range sharedRequestRounds {
			hold()
		}
		return float64(packetsReceived(b, addr)-before) / sharedRequestRounds
	}
	lock := count(func() (locker.Lock, error) { return l.Lock(b.Context(), key+"/lock") })
	permit := count(func() (locker.Lock, error) { return sem.Acquire(b.Context()) })
	b.ReportMetric(lock, "lock-requests")
	b.ReportMetric(permit, "permit-requests")
	b.ReportMetric(permit/lock, "permit-x-lock")
	b.ReportMetric(setLimitRequests(b, l, addr, key+"/setlimit"), "setlimit-requests")
	b.ReportMetric(0, "ns/op")
}

// setLimitRequests counts the requests the server receives per SetLimit
// of a semaphore that one permit holds, the limit going back and forth,
// with the deletion of each record it replaces and of the last one once
// the permit is released.
func setLimitRequests(b *testing.B, l locker.Locker, addr, key string) float64 {
	b.Helper()
	ctx := b.Context()
	sem, err := locker.NewSemaphore(l, key, 4)
	if err != nil {
		b.Fatal(err)
	}
	p, err := sem.Acquire(ctx)
	if err != nil {
		b.Fatal(err)
	}
	const rounds = sharedRequestRounds / 4
	before := packetsReceived(b, addr)
	for i := range rounds {
		if err := sem.SetLimit(ctx, 5+i%2); err != nil {
			b.Fatal(err)
		}
	}
	if err := p.Unlock(ctx); err != nil {
		b.Fatal(err)
	}
	// The record goes in the background: give it a moment.
	time.Sleep(200 * time.Millisecond)
	return float64(packetsReceived(b, addr)-before-1) / rounds // less the Unlock
}
