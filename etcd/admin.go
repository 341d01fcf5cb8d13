package etcd

import (
	"cmp"
	"context"
	"errors"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/golocker/locker/driver"
)

// Break implements driver.Breaker (locker.ForceUnlock): the holder's key
// (the first of the key's directory by create revision) is deleted if it
// has not changed since it was read; the next waiter's watch sees it go.
func (d *etcdDriver) Break(ctx context.Context, key string) error {
	resp, err := d.cli.Get(ctx, Dir(key), clientv3.WithPrefix(),
		clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend), clientv3.WithLimit(1))
	if err != nil {
		return d.classify(err)
	}
	if len(resp.Kvs) == 0 {
		return driver.ErrNotHeld
	}
	kv := resp.Kvs[0]
	if _, ok := parseShared(kv.Value); ok {
		kvs, _, err := d.readShared(ctx, key)
		if err != nil || len(kvs) == 0 {
			return cmp.Or(err, driver.ErrNotHeld)
		}
		return d.breakShared(ctx, kvs)
	}
	del, err := d.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.ModRevision(string(kv.Key)), "=", kv.ModRevision)).
		Then(clientv3.OpDelete(string(kv.Key))).
		Commit()
	if err != nil {
		return d.classify(err)
	}
	if !del.Succeeded {
		return errors.New("etcd: the holder's key changed while it was being deleted; try again")
	}
	return nil
}

// Inspect implements driver.Inspector: the first key of the key's
// directory by create revision is the holder's (value: owner token and
// label), the others are queued waiters. etcd records no time: Acquired is
// zero, and Expires is read from the holder's lease as seconds left.
func (d *etcdDriver) Inspect(ctx context.Context, key string) (driver.Status, error) {
	resp, err := d.cli.Do(ctx, inspectOp(key))
	if err != nil {
		return driver.Status{}, d.classify(err)
	}
	if kvs := resp.Get().Kvs; len(kvs) > 0 {
		if _, ok := parseShared(kvs[0].Value); ok {
			return d.inspectShared(ctx, key)
		}
	}
	st, lease := statusOf(resp.Get())
	if lease != 0 {
		st.Expires = d.leaseExpiry(ctx, lease)
	}
	return st, nil
}

// inspectOp reads the first key of key's directory by create revision, and
// counts them all.
func inspectOp(key string) clientv3.Op {
	return clientv3.OpGet(Dir(key), clientv3.WithPrefix(),
		clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend), clientv3.WithLimit(1))
}

// statusOf is the Status an inspectOp's answer gives, but for Expires, and
// the holder's lease (0 for none).
func statusOf(resp *clientv3.GetResponse) (driver.Status, clientv3.LeaseID) {
	if len(resp.Kvs) == 0 {
		return driver.Status{}, 0
	}
	kv := resp.Kvs[0]
	if r, ok := parseShared(kv.Value); ok {
		return sharedStatusOf(r, kv, int(resp.Count)), clientv3.LeaseID(kv.Lease)
	}
	_, rest, _ := strings.Cut(strings.TrimPrefix(string(kv.Value), keptPrefix), " ")
	label, data := labelAndData(rest)
	return driver.Status{Held: true, Label: label, Data: data, Token: uint64(kv.CreateRevision), Waiters: int(resp.Count) - 1},
		clientv3.LeaseID(kv.Lease)
}

// leaseExpiry is when lease ends, in whole seconds as etcd counts them;
// zero when unknown.
func (d *etcdDriver) leaseExpiry(ctx context.Context, lease clientv3.LeaseID) time.Time {
	if ttl, err := d.cli.TimeToLive(ctx, lease); err == nil && ttl.TTL > 0 {
		return time.Now().Add(time.Duration(ttl.TTL) * time.Second).Round(0)
	}
	return time.Time{}
}
