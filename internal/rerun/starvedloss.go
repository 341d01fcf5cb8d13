package rerun

import "errors"

// StarvedLoss returns err, a lock's Err, when it says only that no renewal
// came back in time, and nil otherwise. Such an err matches noRenewal
// (locker.ErrNoRenewal), and everything it wraps besides lost
// (locker.ErrLost) and noRenewal is a timeout (the last renewal's, when
// one failed). A round whose lock was so lost says nothing, and may run
// again. Any other failure it wraps (the store's answer, a broken
// connection) makes it nil, and so does a loss not at the local deadline
// (a refused renewal, a session gone): a fault a test checks may look just
// like that, so such a round fails at once.
func StarvedLoss(err, lost, noRenewal error) error {
	if errors.Is(err, noRenewal) && saysNothing(err, lost, noRenewal) {
		return err
	}
	return nil
}

// saysNothing reports whether every branch of err's tree ends in one of
// the sentinels or in a timeout. A timeout is an error whose Timeout method
// says so: errors.Is would also find one beside a store's answer.
func saysNothing(err error, sentinels ...error) bool {
	for _, s := range sentinels {
		if err == s {
			return true
		}
	}
	if t, ok := err.(interface{ Timeout() bool }); ok && t.Timeout() {
		return true // context.DeadlineExceeded, a net.Error, an os.ErrDeadlineExceeded
	}
	switch x := err.(type) {
	case interface{ Unwrap() error }:
		return saysNothing(x.Unwrap(), sentinels...)
	case interface{ Unwrap() []error }:
		for _, e := range x.Unwrap() {
			if !saysNothing(e, sentinels...) {
				return false
			}
		}
		return true
	}
	return false
}
