package etcd

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/golocker/locker/driver"
)

// Each key of a semaphore holds in its value the limit its request asked
// for. SetLimit cannot rewrite them: a holder's token is its key's last
// write. It puts a limit record instead, at [LimitKey], outside the key's
// directory: reads and watches of the directory do not see it, and no
// holder's or waiter's key can have its name.
//
// The record rules while the directory has keys, and SetLimit puts it only
// while the directory has a key. The last key to leave its directory
// through this Locker (a release, a failed wait, the end of a MinHold)
// deletes it in the same transaction. A directory emptied otherwise
// (leases that expired, Break) leaves it behind: the next request for a
// shared hold that finds the directory empty deletes it in the transaction
// that creates its key. So a record that exists while the directory has
// keys was put since the directory last had none.
//
// A plain lock taking an empty directory leaves a stale record alone: it
// rules nothing while plain locks hold the key, since a shared request
// behind one gives up, deleting its key. (Only a request that arrives as
// the plain locks leave, while such a key is still first, is judged by the
// stale record.) Plain acquisitions do not read the directory whole, and
// deleting the record there would cost them that read.

// limitPrefix starts a limit record's value, which is followed by the limit.
const limitPrefix = "limit "

// LimitKey returns the etcd key of the limit record of the semaphore on a
// store key: the key encoded as in [Dir], followed by "%limit". No lock's
// directory or waiter key has that name. locker.SetLimit puts it while the
// semaphore has holders or waiters, and the last of them to leave deletes
// it. A record whose holders and waiters all crashed rules nothing, and
// the next request for a permit deletes it.
func LimitKey(key string) string { return KeyPrefix(key) + "%limit" }

// limitKeyOf is LimitKey of the store key whose directory is dir.
func limitKeyOf(dir string) string { return strings.TrimSuffix(dir, "\x00") + "%limit" }

// limitRecord is a limit record as read: its limit (0 when there is none)
// and its mod revision, which the grants that relied on it compare.
type limitRecord struct {
	limit int
	rev   int64
}

// parseLimit reads the answer of a Get of a limit record.
func parseLimit(r *mvccpb.KeyValue) limitRecord {
	if r == nil {
		return limitRecord{}
	}
	n, err := strconv.Atoi(strings.TrimPrefix(string(r.Value), limitPrefix))
	if err != nil || n < 1 {
		// Not ours to read: it rules nothing, and a grant still
		// compares it.
		return limitRecord{rev: r.ModRevision}
	}
	return limitRecord{limit: n, rev: r.ModRevision}
}

// limitOf reads the limit record out of the answer of its Get.
func limitOf(resp *etcdserverpb.RangeResponse) limitRecord {
	if resp == nil || len(resp.Kvs) == 0 {
		return limitRecord{}
	}
	return parseLimit(resp.Kvs[0])
}

// ruling returns the limit of a semaphore whose first key is first: the
// record's when there is one, else first's.
func (lr limitRecord) ruling(first shareRecord) int {
	if lr.limit > 0 {
		return lr.limit
	}
	return first.limit
}

// unchanged compares the record with lr, as read: a grant relies on it.
func (lr limitRecord) unchanged(dir string) clientv3.Cmp {
	return clientv3.Compare(clientv3.ModRevision(limitKeyOf(dir)), "=", lr.rev)
}

// dropStaleLimitOp deletes the limit record of dir if the directory is
// empty, before the transaction it is part of creates a key there. The
// record's existence is compared first: without one, the directory is not
// read.
func dropStaleLimitOp(dir string) clientv3.Op {
	lk := limitKeyOf(dir)
	return clientv3.OpTxn([]clientv3.Cmp{
		clientv3.Compare(clientv3.CreateRevision(lk), ">", 0),
		clientv3.Compare(clientv3.CreateRevision(dir), "=", 0).WithPrefix(),
	}, []clientv3.Op{clientv3.OpDelete(lk)}, nil)
}

// lastOutLimitOp deletes the limit record of st's directory if st's key is
// the only key there, for the transaction that deletes it.
func (st *lockState) lastOutLimitOp() clientv3.Op {
	lk := limitKeyOf(st.dir)
	return clientv3.OpTxn([]clientv3.Cmp{
		clientv3.Compare(clientv3.CreateRevision(lk), ">", 0),
		clientv3.Compare(clientv3.CreateRevision(st.dir), "=", 0).WithRange(st.key),
		clientv3.Compare(clientv3.CreateRevision(st.key+"\x00"), "=", 0).WithRange(clientv3.GetPrefixRangeEnd(st.dir)),
	}, []clientv3.Op{clientv3.OpDelete(lk)}, nil)
}

// limitOps are what a transaction that deletes st's key does to the limit
// record: for a shared hold, lastOutLimitOp; nothing for a plain lock.
func (st *lockState) limitOps() []clientv3.Op {
	if !st.shared {
		return nil
	}
	return []clientv3.Op{st.lastOutLimitOp()}
}

// leaveOps deletes st's key if it is still st's, with limitOps.
func (st *lockState) leaveOps() []clientv3.Op {
	return append([]clientv3.Op{st.deleteOp()}, st.limitOps()...)
}

// SetLimit implements driver.Limiter. It reads the first key of the key's
// directory and the limit record, then puts the record in a transaction
// that compares that key's create revision: the directory still has it, so
// the key is still a semaphore with holders or waiters. A directory with
// no key gets no record. The record's put wakes the key's waiters, whose
// Subscribe watches it. A limit that already rules is not put again.
func (d *etcdDriver) SetLimit(ctx context.Context, key string, limit int) error {
	lk := LimitKey(key)
	for {
		resp, err := d.cli.Txn(ctx).Then(inspectOp(key), clientv3.OpGet(lk)).Commit()
		if err != nil {
			return d.classify(err)
		}
		kvs := resp.Responses[0].GetResponseRange().Kvs
		if len(kvs) == 0 {
			return nil
		}
		first := kvs[0]
		r, ok := parseShared(first.Value)
		switch {
		case !ok:
			return fmt.Errorf("%w: the key is a plain lock, not a semaphore", driver.ErrConflict)
		case r.mode != driver.Permits:
			return fmt.Errorf("%w: the key is %s, not a semaphore", driver.ErrConflict, r.kind())
		}
		lr := limitOf(resp.Responses[1].GetResponseRange())
		if lr.ruling(r) == limit {
			return nil
		}
		put, err := d.cli.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(string(first.Key)), "=", first.CreateRevision)).
			Then(clientv3.OpPut(lk, limitPrefix+strconv.Itoa(limit))).
			Commit()
		if err != nil {
			return d.classify(err)
		}
		if put.Succeeded {
			return nil
		}
		// The first key left meanwhile: read again.
	}
}
