package sharedbench

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golocker/locker"
	"github.com/golocker/locker/memory"
)

// fakeRounds is a Locker of the memory backend for Renewal whose renewal
// rounds are the test's: its own watchdog renews nothing while the test
// runs (a TTL of an hour), and a goroutine reports a round of count
// permits, failures of them failed, every millisecond, each a round trip
// of 60 bytes.
type fakeRounds struct {
	count, failures int
	trips, bytes    atomic.Int64
	stop            chan struct{}
	wg              sync.WaitGroup
}

func (f *fakeRounds) newLocker(b *testing.B) func(locker.Observer) locker.Locker {
	return func(o locker.Observer) locker.Locker {
		l, err := memory.New(memory.NewStore(), locker.WithTTL(time.Hour))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = l.Close() })
		f.stop = make(chan struct{})
		f.wg.Go(func() {
			tick := time.NewTicker(time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-f.stop:
					return
				case <-tick.C:
				}
				f.trips.Add(1)
				f.bytes.Add(60)
				o.Observe(locker.Event{Kind: locker.EventRenewal, Start: time.Now(), Count: f.count, Failures: f.failures})
			}
		})
		b.Cleanup(func() {
			close(f.stop)
			f.wg.Wait()
		})
		return l
	}
}

func (f *fakeRounds) traffic() (int64, int64) { return f.trips.Load(), f.bytes.Load() }

// runRenewal runs run as a benchmark and returns its result, failing t when
// it has not returned within a minute: Renewal must end by itself.
func runRenewal(t *testing.T, run func(b *testing.B)) testing.BenchmarkResult {
	t.Helper()
	done := make(chan testing.BenchmarkResult, 1)
	go func() { done <- testing.Benchmark(run) }()
	select {
	case r := <-done:
		return r
	case <-time.After(time.Minute):
		t.Fatal("Renewal did not return within a minute: it must end by itself")
		return testing.BenchmarkResult{}
	}
}

// TestRenewalSplitRounds: a Locker whose rounds each renew a quarter of the
// permits (taking them outlasted a renewal interval) is measured round by
// round; Renewal used to wait for a round of every permit forever.
func TestRenewalSplitRounds(t *testing.T) {
	f := &fakeRounds{count: renewalHeld / 4}
	r := runRenewal(t, func(b *testing.B) {
		Renewal(b, f.newLocker(b), f.traffic, "split")
	})
	if r.N == 0 {
		t.Fatal("Renewal failed on rounds that renew a quarter of the permits each; it must measure them")
	}
	if got := r.Extra["renewed/round"]; got != renewalHeld/4 {
		t.Errorf("renewed/round = %v, want %d", got, renewalHeld/4)
	}
	if got := r.Extra["trips/round"]; got < 0.5 || got > 2 {
		t.Errorf("trips/round = %v, want about 1 (a round trip a round)", got)
	}
	if got := r.Extra["bytes/permit"]; got <= 0 {
		t.Errorf("bytes/permit = %v, want more than 0", got)
	}
}

// TestRenewalBounded: rounds that never add up to every permit within the
// bound, and a round with failed renewals, make Renewal fail, not wait.
func TestRenewalBounded(t *testing.T) {
	for name, f := range map[string]*fakeRounds{
		"rounds of one permit": {count: 1},
		"failed renewals":      {count: renewalHeld, failures: 3},
	} {
		t.Run(name, func(t *testing.T) {
			r := runRenewal(t, func(b *testing.B) {
				renewal(b, f.newLocker(b), f.traffic, "bounded", renewalBounds{take: time.Minute, round: time.Minute, settle: 200 * time.Millisecond})
			})
			if r.N != 0 {
				t.Fatalf("Renewal measured %d rounds (%v); it must fail", r.N, r.Extra)
			}
		})
	}
}
