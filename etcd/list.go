package etcd

import (
	"context"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/golocker/locker/driver"
)

// List implements driver.Lister: a range read of the waiters' keys under
// the prefix, from the cursor (an etcd key), in key order; the lock
// directories met are then read as Inspect reads them, [txnOps] to a
// transaction, with one TimeToLive per lease. A directory of shared holds
// is read again whole, as Inspect reads it. The next page starts after the
// last directory.
func (d *etcdDriver) List(ctx context.Context, prefix, cursor string, limit int) ([]driver.KeyStatus, string, error) {
	from := KeyPrefix(prefix)
	start := max(cursor, from)
	opts := []clientv3.OpOption{clientv3.WithKeysOnly(), clientv3.WithLimit(int64(max(limit, 1))),
		clientv3.WithSort(clientv3.SortByKey, clientv3.SortAscend)}
	if from == "" {
		opts = append(opts, clientv3.WithFromKey())
	} else {
		opts = append(opts, clientv3.WithRange(clientv3.GetPrefixRangeEnd(from)))
	}
	resp, err := d.cli.Get(ctx, start, opts...)
	if err != nil {
		return nil, "", d.classify(err)
	}
	var keys []string
	last, unescape := "", strings.NewReplacer("%25", "%", "%00", "\x00")
	for _, kv := range resp.Kvs {
		enc, _, ok := strings.Cut(string(kv.Key), "\x00")
		if !ok || enc == last {
			continue // not a lock's waiter, or a directory already met
		}
		last = enc
		keys = append(keys, unescape.Replace(enc))
	}
	page, err := d.inspectAll(ctx, keys)
	if err != nil {
		return nil, "", err
	}
	switch {
	case !resp.More:
		return page, "", nil
	case last == "":
		return page, string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00", nil
	}
	// Every key of last's directory is below last+"\x01": the encoded key
	// holds no NUL.
	return page, last + "\x01", nil
}

// txnOps is how many reads List puts in one transaction, below etcd's
// default --max-txn-ops of 128.
const txnOps = 64

// inspectAll is Inspect of every key, txnOps keys a round trip, and
// returns the held ones in the order of keys.
func (d *etcdDriver) inspectAll(ctx context.Context, keys []string) ([]driver.KeyStatus, error) {
	var page []driver.KeyStatus
	expiry := map[clientv3.LeaseID]time.Time{}
	for len(keys) > 0 {
		chunk := keys[:min(len(keys), txnOps)]
		keys = keys[len(chunk):]
		ops := make([]clientv3.Op, len(chunk))
		for i, k := range chunk {
			ops[i] = inspectOp(k)
		}
		resp, err := d.cli.Txn(ctx).Then(ops...).Commit()
		if err != nil {
			return nil, d.classify(err)
		}
		for i, r := range resp.Responses {
			get := (*clientv3.GetResponse)(r.GetResponseRange())
			if len(get.Kvs) > 0 {
				if _, ok := parseShared(get.Kvs[0].Value); ok {
					st, err := d.inspectShared(ctx, chunk[i])
					if err != nil {
						return nil, err
					}
					if st.Held {
						page = append(page, driver.KeyStatus{Key: chunk[i], Status: st})
					}
					continue
				}
			}
			st, lease := statusOf(get)
			if !st.Held {
				continue
			}
			if lease != 0 {
				at, ok := expiry[lease]
				if !ok {
					at = d.leaseExpiry(ctx, lease)
					expiry[lease] = at
				}
				st.Expires = at
			}
			page = append(page, driver.KeyStatus{Key: chunk[i], Status: st})
		}
	}
	return page, nil
}
