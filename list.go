package locker

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"strings"
	"unicode/utf8"

	"github.com/golocker/locker/driver"
)

// ListPage is how many keys [List] asks its store for at once: the bound
// on what a listing holds in memory.
const ListPage = 500

// KeyStatus is one held key of a listing ([List]): the caller's key
// (without the Locker's prefix) and who holds it, as [Inspect] says.
type KeyStatus struct {
	Key string
	Status
}

// Lister is implemented by Lockers that can list the held keys under a
// prefix: every Locker [New] builds on a backend that can, and wrappers
// that pass it on.
type Lister interface {
	List(ctx context.Context, prefix string) iter.Seq2[KeyStatus, error]
}

// List yields every key held in l's store whose key starts with prefix
// ("" for all), with the same fields as [Inspect]. Keys and prefix are the
// caller's, without the Locker's prefix. It reads the store a page of
// [ListPage] keys at a time, so memory stays bounded however many keys are
// held. A key held throughout the listing is yielded; a key taken or freed
// meanwhile may or may not be. Stores with an order yield keys in
// ascending order, each once (Redis may yield a key twice, see its doc).
//
// A failed read yields the error and ends the listing. It yields an error
// matching [ErrInvalidKey] for a prefix that is not UTF-8, and one matching
// [errors.ErrUnsupported] for a Locker that is not a [Lister], or whose
// backend cannot list.
func List(ctx context.Context, l Locker, prefix string) iter.Seq2[KeyStatus, error] {
	if ctx == nil {
		return failed(&Error{Op: "list", Key: prefix, Err: ErrInvalidOption, Cause: errNilContext})
	}
	ls, ok := l.(Lister)
	if !ok {
		return failed(&Error{Op: "list", Key: prefix, Err: errors.ErrUnsupported, Cause: fmt.Errorf("%T cannot list keys", l)})
	}
	return ls.List(ctx, prefix)
}

// failed is a listing that yields err alone.
func failed(err error) iter.Seq2[KeyStatus, error] {
	return func(yield func(KeyStatus, error) bool) { yield(KeyStatus{}, err) }
}

// List implements Lister: the Locker's prefix is added to prefix on the way
// to the store and taken off every key on the way back.
func (e *engine) List(ctx context.Context, prefix string) iter.Seq2[KeyStatus, error] {
	if ctx == nil {
		return failed(e.err("list", prefix, ErrInvalidOption, errNilContext))
	}
	ls, ok := e.drv.(driver.Lister)
	if !ok {
		return failed(e.err("list", prefix, errors.ErrUnsupported, fmt.Errorf("the %s backend cannot list keys", e.name)))
	}
	if !utf8.ValidString(prefix) {
		return failed(e.err("list", prefix, ErrInvalidKey, errors.New("prefix is not valid UTF-8")))
	}
	sprefix := e.cfg.prefix + prefix
	return func(yield func(KeyStatus, error) bool) {
		cursor := ""
		for {
			if err := ctx.Err(); err != nil {
				yield(KeyStatus{}, e.err("list", prefix, nil, err))
				return
			}
			p, err := read(e, "list", prefix, ctx, func(ctx context.Context) (listPage, error) {
				var p listPage
				var err error
				p.keys, p.next, err = ls.List(ctx, sprefix, cursor, ListPage)
				return p, err
			})
			if err != nil {
				yield(KeyStatus{}, err)
				return
			}
			for _, ks := range p.keys {
				key, ok := strings.CutPrefix(ks.Key, e.cfg.prefix)
				if !ok || !strings.HasPrefix(key, prefix) || !ks.Held {
					continue // not ours: a driver that matched too much
				}
				if !yield(KeyStatus{Key: key, Status: statusOf(ks.Status)}, nil) {
					return
				}
			}
			if p.next == "" {
				return
			}
			cursor = p.next
		}
	}
}

// listPage is one page of a driver's listing, and the cursor of the next.
type listPage struct {
	keys []driver.KeyStatus
	next string
}
