package locker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"iter"
	"time"

	"github.com/golocker/locker/driver"
)

// DefaultWatchEvery is how often [Watch] asks the store about a key when
// l is not a Locker built by [New] and no [WatchEvery] is given.
const DefaultWatchEvery = time.Second

// WatchOption configures [Watch].
type WatchOption func(*watchConfig) error

type watchConfig struct{ every time.Duration }

// WatchEvery sets how often [Watch] asks the store, at most d apart. The
// default is a quarter of the Locker's TTL for a Locker built by [New], and
// [DefaultWatchEvery] for others. d must be positive.
func WatchEvery(d time.Duration) WatchOption {
	return func(c *watchConfig) error {
		if d <= 0 {
			return invalidOption("WatchEvery", "the interval must be positive, got %v", d)
		}
		c.every = d
		return nil
	}
}

// watchSource is implemented by the engine: the poll interval its TTL
// calls for, the driver's release notifications where it has them, and a
// channel closed when the Locker is closed.
type watchSource interface {
	watchEvery() time.Duration
	watchNotify(ctx context.Context, key string) (<-chan struct{}, func(), bool)
	closing() <-chan struct{}
}

// Watch follows who holds key in l's store, for any replica, holder or not.
// It yields the key's [Status] at once, then each time the holder changes:
// another token, another label, other data ([SetData]), or nobody; for a shared key, each time its
// set of holders changes. It ends when ctx ends or the loop body breaks.
//
// A change is reported within one poll interval of the store's change
// ([WatchEvery]; a quarter of the TTL by default). Where the backend pushes
// releases, a release is reported as soon as the store tells it. Holders
// of a key held exclusively are reported in the store's order: never a
// lower token after a higher.
//
// A failed read yields the error with a zero Status, and Watch goes on: the
// holder is unknown until the next Status. Watch ends after yielding an
// error matching [errors.ErrUnsupported] (l is not an [Inspector]),
// [ErrInvalidKey], [ErrInvalidOption] or [ErrClosed]. For a Locker built by
// [New], Close ends the watch at once, with an error matching [ErrClosed].
func Watch(ctx context.Context, l Locker, key string, opts ...WatchOption) iter.Seq2[Status, error] {
	return func(yield func(Status, error) bool) {
		if ctx == nil {
			yield(Status{}, &Error{Op: "watch", Key: key, Err: ErrInvalidOption, Cause: errNilContext})
			return
		}
		cfg := watchConfig{every: DefaultWatchEvery}
		src, _ := l.(watchSource)
		if src != nil {
			cfg.every = src.watchEvery()
		}
		for i, o := range opts {
			var err error
			if o == nil {
				err = invalidOption("option", "watch option %d is nil", i)
			} else {
				err = o(&cfg)
			}
			if err != nil {
				yield(Status{}, &Error{Op: "watch", Key: key, Cause: err})
				return
			}
		}
		ins, ok := l.(Inspector)
		if !ok {
			yield(Status{}, &Error{Op: "watch", Key: key, Err: errors.ErrUnsupported, Cause: fmt.Errorf("%T cannot tell who holds a key", l)})
			return
		}
		var notify, closed <-chan struct{}
		if src != nil {
			if ch, cancel, ok := src.watchNotify(ctx, key); ok {
				defer cancel()
				notify = ch
			}
			closed = src.closing()
		}
		watchLoop(ctx, ins, key, cfg.every, notify, closed, yield)
	}
}

// watchLoop reads the key's status every interval, and at once when
// notify receives or closed is closed, and yields the changes.
func watchLoop(ctx context.Context, ins Inspector, key string, every time.Duration, notify, closed <-chan struct{}, yield func(Status, error) bool) {
	var (
		last  Status
		known bool
		high  uint64 // the highest token yielded
	)
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		case <-notify:
			timer.Stop()
		case <-closed:
			// The read says ErrClosed, which ends the watch.
			timer.Stop()
			closed = nil
		}
		st, err := ins.Inspect(ctx, key)
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			known = false
			if !yield(Status{}, err) || watchFatal(err) {
				return
			}
		case st.Held && st.Holders == nil && st.Token < high:
			// An older read overtaken by a newer one (a lagging replica):
			// the store has moved on already. (A shared key's newest
			// holder may leave before older ones.)
		case !known || !sameHolder(last, st):
			last, known = st, true
			high = max(high, st.Token)
			if !yield(st, nil) {
				return
			}
		}
		timer.Reset(driver.Jitter(every))
	}
}

// sameHolder reports whether a and b name the same holds of the key.
func sameHolder(a, b Status) bool {
	if !a.Held || !b.Held {
		return a.Held == b.Held
	}
	if a.Token != b.Token || a.Label != b.Label || !bytes.Equal(a.Data, b.Data) || len(a.Holders) != len(b.Holders) {
		return false
	}
	tokens := make(map[uint64]bool, len(a.Holders))
	for _, h := range a.Holders {
		tokens[h.Token] = true
	}
	for _, h := range b.Holders {
		if !tokens[h.Token] {
			return false
		}
	}
	return true
}

// watchFatal reports whether a read error ends the watch.
func watchFatal(err error) bool {
	return errors.Is(err, errors.ErrUnsupported) || errors.Is(err, ErrInvalidKey) ||
		errors.Is(err, ErrInvalidOption) || errors.Is(err, ErrClosed)
}

// watchEvery implements watchSource: a quarter of the TTL.
func (e *engine) watchEvery() time.Duration { return max(e.cfg.ttl/4, time.Millisecond) }

// closing implements watchSource: Close cancels the engine's ctx.
func (e *engine) closing() <-chan struct{} { return e.ctx.Done() }

// watchNotify implements watchSource with the driver's release
// notifications; it reports false where the driver has none.
func (e *engine) watchNotify(ctx context.Context, key string) (<-chan struct{}, func(), bool) {
	if e.notifier == nil {
		return nil, nil, false
	}
	skey, err := e.storeKey("watch", key)
	if err != nil {
		return nil, nil, false
	}
	ch, cancel, err := e.notifier.Subscribe(ctx, skey)
	if err != nil {
		if ctx.Err() == nil {
			e.cfg.logger.Warn("locker: subscribe failed, watching by polling", "backend", e.name, "key", key, "err", err)
		}
		return nil, nil, false
	}
	return ch, cancel, true
}
