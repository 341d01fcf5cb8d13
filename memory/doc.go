// Package memory is the in-process locker backend: the reference
// implementation of the driver contract, and what single-instance deployments
// and users' own unit tests use.
//
// Lockers created on the same [Store] contend with each other exactly as
// replicas contend on a shared server:
//
//	store := memory.NewStore()
//	a, _ := memory.New(store)
//	b, _ := memory.New(store)
//
// The reasons behind the shared engine are in the repository's
// docs/design.md.
//
// # Guarantees
//
// Mutual exclusion within the process; fencing tokens strictly increasing per
// Store; waiters are woken at once by releases (no polling) and by the
// holder's expiry; expiry uses the monotonic clock.
//
// # Limits
//
// One process only: it is not a distributed lock. State is lost with the
// process. [NewFaulty] injects store failures for tests.
package memory
