package conformance

import (
	"errors"
	"fmt"

	"github.com/golocker/locker"
)

// testCheckOptions: locker.CheckLockOptions refuses exactly the option sets
// that TryLock refuses for their options (an error matching
// ErrInvalidOption), so that an adapter can refuse a misconfiguration when
// it is built instead of at every acquisition.
func testCheckOptions(c *caseT) {
	contract := c.contract
	ctx := c.ctx(c.within(3))
	l := c.newLocker()
	if _, ok := l.(locker.OptionChecker); !ok {
		c.Skipf("the Locker is not a locker.OptionChecker")
	}
	ttl := c.h.TTL
	sets := []struct {
		name string
		opts []locker.LockOption
	}{
		{"none", nil},
		{"MinHold(TTL/2)", []locker.LockOption{locker.MinHold(ttl / 2)}},
		{"MinHold(2*TTL)", []locker.LockOption{locker.MinHold(2 * ttl)}},
		{"TTL(2*TTL)", []locker.LockOption{locker.TTL(2 * ttl)}},
		{"MaxHold(TTL)", []locker.LockOption{locker.MaxHold(ttl)}},
		{"MinHold(-1)", []locker.LockOption{locker.MinHold(-1)}},
		{"MaxHold(0)", []locker.LockOption{locker.MaxHold(0)}},
		{"MaxHold under MinHold", []locker.LockOption{locker.MinHold(ttl / 2), locker.MaxHold(ttl / 4)}},
		{"nil", []locker.LockOption{nil}},
	}
	for i, s := range sets {
		checked := locker.CheckLockOptions(l, s.opts...)
		if checked != nil && !errors.Is(checked, locker.ErrInvalidOption) {
			c.Errorf("%s: CheckLockOptions with %s = %v; want nil or an error matching ErrInvalidOption", contract, s.name, checked)
			continue
		}
		key := fmt.Sprintf("%s-%d", c.key(), i)
		lk, err := l.TryLock(ctx, key, s.opts...)
		if lk != nil {
			c.unlock(ctx, lk, contract)
		}
		switch refused := errors.Is(err, locker.ErrInvalidOption); {
		case err != nil && !refused:
			c.Fatalf("%s: TryLock with %s: %v", contract, s.name, err)
		case refused && checked == nil:
			c.Errorf("%s: TryLock refused %s (%v) but CheckLockOptions accepted it", contract, s.name, err)
		case !refused && checked != nil:
			c.Errorf("%s: TryLock accepted %s but CheckLockOptions refused it (%v)", contract, s.name, checked)
		}
	}
}
