// Package rerun runs a test's round again when its lock was lost at its
// local deadline: renewals starved on a loaded machine, as the contract
// allows, and the round then says nothing of what it tests
// (docs/design.md, "Tests on a loaded machine"). StarvedLoss tells such
// a loss from one the store answered, which fails at once. Stalled runs
// a round again when the process stalled while it ran: an in-memory store
// expires a starved lock itself, so its loss need not read as starved. It
// imports only the standard library and internal/stall, so that the
// repository's other modules and the root package's own tests can use it.
package rerun

import "testing"

// Starved runs round, given its number from 1, until it returns nil, at
// most attempts times. A round returns why it said nothing (a lock lost at
// its local deadline), and fails t itself on any other fault; a round that
// said nothing runs again, logged, and the last one fails t.
func Starved(t testing.TB, attempts int, round func(attempt int) error) {
	t.Helper()
	for i := 1; ; i++ {
		starved := round(i)
		if starved == nil {
			return
		}
		if i >= attempts {
			t.Fatalf("attempt %d of %d: %v: a lock was lost at its local deadline in every attempt", i, attempts, starved)
			return
		}
		t.Logf("attempt %d of %d: %v: the round runs again", i, attempts, starved)
	}
}
