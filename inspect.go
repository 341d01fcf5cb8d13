package locker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/golocker/locker/driver"
)

// Status is who holds a key, as the store says: see [Inspect]. Times are
// the store's clock where it has one.
type Status struct {
	// Held reports whether somebody holds the key (a lock kept for its
	// MinHold counts).
	Held bool
	// Label is the holder's owner label (WithOwnerLabel).
	Label string
	// Token is the holder's fencing token.
	Token uint64
	// Acquired is when the holder took the key; zero when the store does
	// not record it (etcd).
	Acquired time.Time
	// Expires is when the store frees the key unless it is renewed; zero
	// when unknown (ZooKeeper keeps it while the holder's session lives).
	Expires time.Time
	// Waiters is how many contenders are queued for the key in the store; 0
	// for stores where waiters poll (MySQL).
	Waiters int
	// Limit is the number of permits of a semaphore's key; 0 for other keys.
	Limit int
	// Holders lists every holder of a semaphore's or read-write lock's key
	// (see [NewSemaphore], [NewRWMutex]); nil for other keys. Held, Label,
	// Token, Acquired and Expires then describe the newest holder.
	Holders []Holder
	// Data is the data the holder stored with its hold ([WithData],
	// [SetData]); nil when none, and when the key is free.
	Data []byte
}

// Holder is one holder of a semaphore's or read-write lock's key, in
// [Status.Holders].
type Holder struct {
	// Mode is the kind of hold.
	Mode Mode
	// Weight is how many permits it takes (Permits), or 1.
	Weight int
	// Label is the holder's owner label (WithOwnerLabel).
	Label string
	// Token is the hold's fencing token.
	Token uint64
	// Acquired and Expires are as in [Status]; zero when unknown.
	Acquired, Expires time.Time
}

// Inspector is implemented by Lockers that can tell who holds a key: every
// Locker [New] builds on a backend that can (all the built-in ones), and
// wrappers that pass it on.
type Inspector interface {
	Inspect(ctx context.Context, key string) (Status, error)
}

// Inspect tells who holds key in l's store: the holder's owner label,
// fencing token, when it was acquired and when it expires unless renewed
// (on the store's clock where it has one), and how many waiters are queued;
// Held is false when the key is free. It only reads, and works for any key,
// whoever holds it: "who leads" for [Elect], or who runs a job. The key is
// the caller's, without the Locker's prefix.
//
// It returns an error matching [errors.ErrUnsupported] for a Locker that is
// not an [Inspector], or whose backend cannot tell.
func Inspect(ctx context.Context, l Locker, key string) (Status, error) {
	if ctx == nil {
		return Status{}, &Error{Op: "inspect", Key: key, Err: ErrInvalidOption, Cause: errNilContext}
	}
	i, ok := l.(Inspector)
	if !ok {
		return Status{}, &Error{Op: "inspect", Key: key, Err: errors.ErrUnsupported, Cause: fmt.Errorf("%T cannot tell who holds a key", l)}
	}
	return i.Inspect(ctx, key)
}

// Inspect implements Inspector.
func (e *engine) Inspect(ctx context.Context, key string) (Status, error) {
	if ctx == nil {
		return Status{}, e.err("inspect", key, ErrInvalidOption, errNilContext)
	}
	ins, ok := e.drv.(driver.Inspector)
	if !ok {
		return Status{}, e.err("inspect", key, errors.ErrUnsupported, fmt.Errorf("the %s backend cannot tell who holds a key", e.name))
	}
	skey, err := e.storeKey("inspect", key)
	if err != nil {
		return Status{}, err
	}
	st, err := read(e, "inspect", key, ctx, func(ctx context.Context) (driver.Status, error) { return ins.Inspect(ctx, skey) })
	if err != nil {
		return Status{}, err
	}
	return statusOf(st), nil
}

// statusOf is what a driver says of a key, as package locker says it.
func statusOf(st driver.Status) Status {
	out := Status{Held: st.Held, Label: st.Label, Token: st.Token, Acquired: st.Acquired, Expires: st.Expires,
		Waiters: st.Waiters, Limit: st.Limit, Data: st.Data}
	if !st.Held || len(out.Data) == 0 {
		out.Data = nil
	}
	for _, h := range st.Holders {
		out.Holders = append(out.Holders, Holder{Mode: Mode(h.Mode), Weight: h.Weight, Label: h.Label, Token: h.Token,
			Acquired: h.Acquired, Expires: h.Expires})
	}
	return out
}
