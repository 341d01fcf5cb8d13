package conformance

const lateGrant = "a lock, multi-key lock or permit that Lock, TryLock, TryLockMulti or TryAcquire returns must be held when it returns, also when its request waited for the caller's busy client or pool past the hold's validity: a grant that came back late is confirmed with the store, or refused, never handed over already lost"

// testLateGrant starts a TryLock, a Lock, a TryLockMulti of two keys and
// a semaphore's TryAcquire of free keys while the caller's own slow work
// holds the client or pool it shares with the Locker (Harness.Busy) for a
// TTL, then ends that work.
// Each request reaches the store after the validity its grant counts from
// the request's sending: a Locker that returns that grant as it is hands
// its caller a hold already lost, whose key the store may give to another
// holder while the caller's work runs. Each call must return a hold whose
// Done is still open, or an error.
func testLateGrant(c *caseT) {
	c.need("Busy", c.h.Busy != nil, "keep the caller's client or pool busy with its own slow work")
	busyFor := c.h.TTL // past the validity: the engine counts on 0.9 of it
	ctx := c.ctx(busyFor + c.within(3))
	a := c.newLocker()
	tries := []busyTryCall{
		{"TryLock", func() (busyHold, error) { return oneHold(a.TryLock(ctx, c.key())) }},
		{"Lock", func() (busyHold, error) { return oneHold(a.Lock(ctx, c.key())) }},
		{"TryLockMulti of two keys", func() (busyHold, error) { return multiHold(c.lockMulti(ctx, a, c.multiKeys(2), false)) }},
	}
	if s := c.sharedSemaphore(a, c.key(), 2, "the semaphore"); s != nil {
		tries = append(tries, busyTryCall{"TryAcquire", func() (busyHold, error) { return oneHold(s.TryAcquire(ctx)) }})
	}
	for _, r := range c.besideBusy(ctx, a, busyFor, tries) {
		switch {
		case r.err != nil:
			// A refusal keeps the contract: Redlock bounds an attempt by
			// the validity, and a late grant may be refused.
			c.Logf("%s of a free key failed: %v", r.what, r.err)
		case r.lost != nil:
			c.Errorf("%s: %s returned a hold already lost: %v", c.contract, r.what, r.lost)
		}
	}
}
