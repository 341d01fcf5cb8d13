package etcd

import (
	"context"
	"fmt"
	"strings"
	"sync"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/golocker/locker/driver"
)

// dataSep ends the owner label in a lock key's value when the lock carries
// data (locker.WithData), which follows it. A label never contains it:
// locker.WithOwnerLabel refuses a NUL byte.
const dataSep = "\x00"

// lockValue is a lock key's value: the owner token, a space, the owner
// label, then dataSep and the data when there is data.
func lockValue(owner, label string, data []byte) string {
	if len(data) == 0 {
		return owner + " " + label
	}
	return owner + " " + label + dataSep + string(data)
}

// labelAndData takes the part of a lock key's value after the owner token
// apart: the label and the data (nil: none).
func labelAndData(s string) (string, []byte) {
	label, data, ok := strings.Cut(s, dataSep)
	if !ok || data == "" {
		return label, nil
	}
	return label, []byte(data)
}

// dataWrites is the part of lockState that SetData changes.
type dataWrites struct {
	// write is held by SetData and moveKey, which both put the key's
	// value: one at a time, so that neither puts back an older value.
	write sync.Mutex
	mu    sync.Mutex
	// written is the value SetData put last ("" before any); once set,
	// the key is told apart from a later key of the same name by its
	// create revision instead of its value, which a SetData of unknown
	// outcome leaves unknown.
	written string
}

// now returns the key's value as this Locker last wrote it, and whether
// SetData wrote it.
func (st *lockState) now() (string, bool) {
	st.data.mu.Lock()
	defer st.data.mu.Unlock()
	if st.data.written != "" {
		return st.data.written, true
	}
	return st.value, false
}

// mine is the comparison that holds while st's key is still st's.
func (st *lockState) mine() clientv3.Cmp {
	if _, changed := st.now(); changed {
		return clientv3.Compare(clientv3.CreateRevision(st.key), "=", st.rev)
	}
	return clientv3.Compare(clientv3.Value(st.key), "=", st.value)
}

// SetData implements driver.DataSetter: the key's value is put again, on
// its lease, if the key still has the lock's create revision.
func (d *etcdDriver) SetData(ctx context.Context, l driver.Lease, data []byte) error {
	st, ok := l.State.(*lockState)
	if !ok {
		return fmt.Errorf("setdata: %w: shared holds carry no data", driver.ErrPermanent)
	}
	st.data.write.Lock()
	defer st.data.write.Unlock()
	d.mu.Lock()
	dead, own := st.sess.dead, st.own
	d.mu.Unlock()
	if dead != nil && own == nil {
		return fmt.Errorf("%w: %w", driver.ErrNotHeld, dead) // the key went with the lease
	}
	owner, rest, _ := strings.Cut(st.value, " ")
	label, _ := labelAndData(rest)
	v := lockValue(owner, label, data)
	// From now on the value may be either: compare create revisions.
	st.data.mu.Lock()
	st.data.written = v
	st.data.mu.Unlock()
	resp, err := d.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(st.key), "=", st.rev)).
		Then(clientv3.OpPut(st.key, v, clientv3.WithIgnoreLease())).
		Commit()
	if err != nil {
		return d.classify(err)
	}
	if !resp.Succeeded {
		return fmt.Errorf("%w: key %q deleted or replaced", driver.ErrNotHeld, st.key)
	}
	return nil
}
