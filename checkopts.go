package locker

import "errors"

// OptionChecker is implemented by Lockers that can tell, without taking a
// lock, whether they accept a set of [LockOption]: every Locker [New]
// builds, and wrappers that pass it on.
type OptionChecker interface {
	CheckLockOptions(opts ...LockOption) error
}

// CheckLockOptions returns the error that Lock and TryLock on l would
// return for opts because of the options alone: it matches
// [ErrInvalidOption] and names the option. It takes no lock and calls no
// store. Adapters call it when they are built, so that a misconfiguration
// fails once instead of at every acquisition.
//
// For a Locker that is not an [OptionChecker] it checks only what every
// Locker refuses (a nil option, a bad value, MaxHold shorter than MinHold).
// A nil Locker gives an error matching ErrInvalidOption.
func CheckLockOptions(l Locker, opts ...LockOption) error {
	const op = "checkoptions"
	if l == nil {
		return &Error{Op: op, Err: ErrInvalidOption, Cause: errors.New("nil Locker")}
	}
	if c, ok := l.(OptionChecker); ok {
		return c.CheckLockOptions(opts...)
	}
	if _, err := applyLockOptions(opts); err != nil {
		return &Error{Op: op, Cause: err}
	}
	return nil
}

// CheckLockOptions implements OptionChecker, with the checks of every
// acquisition.
func (e *engine) CheckLockOptions(opts ...LockOption) error {
	if _, err := e.lockOptions(opts); err != nil {
		return e.err("checkoptions", "", nil, err)
	}
	return nil
}
