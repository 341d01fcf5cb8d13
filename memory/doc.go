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
// Semaphores and read-write locks (locker.NewSemaphore, locker.NewRWMutex)
// grant their waiters in the order they lined up: a request for several
// permits is not overtaken by later single ones, and a waiting writer
// blocks later readers. A waiter's place lasts one TTL past its last
// attempt. The limit lives with the key while it has holders or waiters.
//
// locker.TryLockMulti and locker.LockMulti take every key of a set under
// one hold of the Store's mutex, or none; a MultiLock's Unlock releases
// them under one hold too.
//
// # Limits
//
// One process only: it is not a distributed lock. State is lost with the
// process. [NewFaulty] injects store failures for tests.
package memory
