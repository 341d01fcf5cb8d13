//go:build unix

package main

import (
	"slices"
	"testing"
	"time"

	"github.com/golocker/locker"
)

// TestTopOrder: most waiters first, then the longest held, keys whose
// acquisition is unknown (etcd) after those of the same waiters, then by
// key.
func TestTopOrder(t *testing.T) {
	t0 := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	ks := func(key string, waiters int, acquired time.Time) locker.KeyStatus {
		return locker.KeyStatus{Key: key, Status: locker.Status{Held: true, Waiters: waiters, Acquired: acquired}}
	}
	want := []locker.KeyStatus{
		ks("busy", 3, t0.Add(time.Hour)),
		ks("old", 1, t0),
		ks("new", 1, t0.Add(time.Minute)),
		ks("unknown-a", 1, time.Time{}),
		ks("unknown-b", 1, time.Time{}),
		ks("idle", 0, t0),
	}
	got := slices.Clone(want)
	slices.Reverse(got)
	slices.SortFunc(got, topRows)
	for i := range want {
		if got[i].Key != want[i].Key {
			t.Fatalf("top's order: %v; want %v", keysOf(got), keysOf(want))
		}
	}
}

func keysOf(s []locker.KeyStatus) []string {
	out := make([]string, len(s))
	for i, k := range s {
		out[i] = k.Key
	}
	return out
}
