package driver

import (
	"context"
	"iter"
	"slices"
	"sync"
)

// KeyStatus is one held key of a listing ([Lister]): the store key and
// what the store says of it.
type KeyStatus struct {
	// Key is the store key (with the Locker's prefix).
	Key string
	Status
}

// Lister is implemented by drivers that can list the held keys under a
// prefix (locker.List), page by page, with a cursor kept by the store. It
// only reads.
type Lister interface {
	// List returns the held keys whose store key starts with prefix, at
	// most limit of them, from the position cursor names ("" starts at the
	// beginning), and the cursor of the next page ("" when the listing is
	// done). A page may be short, even empty, before the end. Free keys
	// are left out. A key held from the first call to the last must
	// appear in one page; a key taken or freed meanwhile may or may not.
	// Stores with an order return keys in ascending order, each once.
	List(ctx context.Context, prefix, cursor string, limit int) (page []KeyStatus, next string, err error)
}

// Page picks from keys, in any order, the limit smallest after cursor, in
// ascending order, and the cursor of the next page ("" when none is left).
// It is List's paging for stores that can only read every name at once. It
// holds at most 2*limit keys; limit is at least 1.
func Page(keys iter.Seq[string], cursor string, limit int) (page []string, next string) {
	limit = max(limit, 1)
	page, more, top := make([]string, 0, 2*limit), false, ""
	for k := range keys {
		if k <= cursor || more && k >= top {
			continue
		}
		if page = append(page, k); len(page) == 2*limit {
			slices.Sort(page)
			page, more, top = page[:limit], true, page[limit-1]
		}
	}
	slices.Sort(page)
	if more || len(page) > limit {
		page = page[:min(len(page), limit)]
		next = page[len(page)-1]
	}
	return page, next
}

// inspectAllAtOnce is how many Inspect calls InspectAll makes at once.
const inspectAllAtOnce = 16

// InspectAll reads keys with ins, up to 16 at once, and returns the held
// ones, in the order of keys: List for stores without a read of many locks
// at once. The first error ends it.
func InspectAll(ctx context.Context, ins Inspector, keys []string) ([]KeyStatus, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		sts   = make([]Status, len(keys))
		slots = make(chan struct{}, inspectAllAtOnce)
		wg    sync.WaitGroup
		once  sync.Once
		first error
	)
	fail := func(err error) {
		once.Do(func() { first = err })
		cancel()
	}
	for i, k := range keys {
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-slots }()
			st, err := ins.Inspect(ctx, k)
			if err != nil {
				fail(err)
				return
			}
			sts[i] = st
		}()
	}
	wg.Wait()
	if first != nil {
		return nil, first
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var page []KeyStatus
	for i, st := range sts {
		if st.Held {
			page = append(page, KeyStatus{Key: keys[i], Status: st})
		}
	}
	return page, nil
}
