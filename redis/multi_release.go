package redis

import (
	"context"
	"fmt"

	goredis "github.com/redis/go-redis/v9"

	"github.com/golocker/locker/driver"
)

// ReleaseMulti implements driver.MultiReleaser: one script releases every
// lock nobody is queued for (multi_release.lua), and one pipeline of
// release.lua hands the others over. Each release wakes its key's waiters
// as Release does. Where the keys cannot go in one script (a Ring, Cluster
// keys in different hash slots, more than maxMultiKeys), the pipeline
// releases them all. A shared hold's lease is released on its own.
func (d *redisDriver) ReleaseMulti(ctx context.Context, ls []driver.Lease) ([]error, error) {
	errs := make([]error, len(ls))
	plain := make([]int, 0, len(ls)) // the indexes of the locks
	for i, l := range ls {
		if isShared(l) {
			errs[i] = d.releaseShared(ctx, l)
			continue
		}
		plain = append(plain, i)
	}
	each := plain // released by release.lua, one call each
	if len(plain) > 1 && d.oneScript(ls, plain) {
		n := len(plain)
		strs := make([]string, 4*n)
		keys := strs[: 3*n : 3*n] // grouped by kind, see multi_release.lua
		anys := make([]any, 5*n+3)
		boxed := anys[: 3*n : 3*n] // nil once a lease's names are not boxed
		args := anys[3*n : 3*n : 5*n+3]
		for j, i := range plain {
			nm := leaseNames(ls[i])
			keys[j], keys[n+j], keys[2*n+j] = nm.keys[0], nm.keys[2], nm.keys[3]
			if k := nm.keyArgs; k != nil && boxed != nil {
				boxed[j], boxed[n+j], boxed[2*n+j] = k[0], k[2], k[3]
			} else {
				boxed = nil
			}
			// The channel even without pub/sub: a LockMulti of a Locker
			// with pub/sub may wait on it (see release.lua).
			args = append(args, ls[i].Owner, nm.channelArg)
		}
		// The next wait of this Locker, which the release records when
		// it wakes a LockMulti (multi_next.go): a fair Locker's, and an
		// unfair one's whose streak of deferred wake-ups ended
		// (multi_defer.go).
		skeys := strs[3*n:]
		for j, i := range plain {
			skeys[j] = ls[i].Key
		}
		deferArg := "0"
		var nw *nextWait
		if d.mayDefer(skeys) {
			deferArg = "1"
		} else {
			nw = d.park(skeys)
		}
		nextField := ""
		if nw != nil {
			nextField = nw.field
			defer func() {
				if nw != nil {
					nw.leave() // not recorded
				}
			}()
		}
		args = append(args, nextField, d.staleArg(ls[plain[0]].TTL), deferArg)
		var owed []string
		v, err := d.runScript(ctx, d.multiRelease, keys, boxed, args...)
		reply, _ := v.([]any)
		switch {
		case err != nil && hasPrefix(err, "CROSSSLOT"):
			// A wrapped Cluster client: one by one.
		case err != nil:
			err = fmt.Errorf("release: %w", classify(err))
			for _, i := range plain {
				errs[i] = err
			}
			return errs, nil
		case len(reply) != len(plain):
			err = fmt.Errorf("release: unexpected reply %v", v)
			for _, i := range plain {
				errs[i] = err
			}
			return errs, nil
		default:
			each = nil
			for j, r := range reply {
				i := plain[j]
				switch n, _ := r.(int64); n {
				case 0:
					errs[i] = fmt.Errorf("release: %w", driver.ErrNotHeld)
				case 1:
				case 2:
					d.noPubSub(errPublishRefused)
				case 4, 5:
					if n == 5 {
						d.noPubSub(errPublishRefused)
					}
					if nw != nil {
						d.recorded(ls[i].Key, nw, refreshInterval(ls[i].TTL))
						nw = nil
					}
				case 3:
					each = append(each, i)
				case 6:
					owed = append(owed, ls[i].Key)
				default:
					errs[i] = fmt.Errorf("release: unexpected reply %v", v)
				}
			}
			if owed != nil {
				d.deferred(owed)
			}
		}
	}
	if len(each) == 0 {
		return errs, nil
	}
	calls := make([]evalCall, len(each))
	for j, i := range each {
		nm := leaseNames(ls[i])
		calls[j] = evalCall{script: d.release, keys: nm.keys[:4:4],
			args: []any{ls[i].Owner, nm.channelArg, d.retentionArg, "0", d.unfairArg}}
	}
	for j, c := range evalPipelined(ctx, d.client, calls) {
		n, err := c.Int64()
		if n == 2 {
			d.noPubSub(errPublishRefused)
			n = 1
		}
		switch i := each[j]; {
		case err != nil:
			errs[i] = fmt.Errorf("release: %w", classify(err))
		case n == 0:
			errs[i] = fmt.Errorf("release: %w", driver.ErrNotHeld)
		}
	}
	return errs, nil
}

// oneScript reports whether the locks ls[i], i in idx, can be released by
// one script: not on a Ring, not more than maxMultiKeys, and on a Cluster
// all in one hash slot.
func (d *redisDriver) oneScript(ls []driver.Lease, idx []int) bool {
	if len(idx) > maxMultiKeys {
		return false
	}
	switch d.client.(type) {
	case *goredis.Ring:
		return false
	case *goredis.ClusterClient:
		slot := hashSlot(leaseKey(ls[idx[0]]))
		for _, i := range idx[1:] {
			if hashSlot(leaseKey(ls[i])) != slot {
				return false
			}
		}
	}
	return true
}
