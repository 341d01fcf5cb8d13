package etcd

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/golocker/locker"
)

// MaxKeyBytes is the longest store key (prefix included, in bytes) the etcd
// backend accepts. Longer keys fail with locker.ErrInvalidKey.
const MaxKeyBytes = 4096

// ErrLeaseLost is the cause of the errors of waits and of lost locks when the
// Locker's etcd lease ended: it expired (the Locker could not reach etcd for
// a TTL) or it was revoked.
var ErrLeaseLost = errors.New("etcd: the Locker's lease expired or was revoked")

// Config holds the etcd backend's own settings. The zero Config is the
// default: New(client, opts...) is Config{}.New(client, opts...).
type Config struct {
	// DialTimeout bounds the wait for a connection to the server when the
	// Locker is made; 0 means [DefaultDialTimeout].
	DialTimeout time.Duration
}

// New returns a Locker that keeps its locks in etcd through client. client is
// the caller's: the Locker never closes it. The options are the shared locker
// options; the TTL must be whole seconds and at least the server's minimum
// lease TTL (see the package doc). New grants the Locker's lease, so it fails
// when etcd cannot be reached: with the connection's error once no
// connection is up within c.DialTimeout.
//
// It returns an error matching locker.ErrInvalidOption for a nil client, a
// negative DialTimeout, or a TTL the server cannot honour.
func (c Config) New(client *clientv3.Client, opts ...locker.Option) (locker.Locker, error) {
	return c.NewContext(context.Background(), client, opts...)
}

// NewContext is [Config.New] with ctx bounding its first lease grant (New
// itself gives it 30 seconds): for a service that must start, or fail
// naming the endpoints, within its own deadline.
func (c Config) NewContext(ctx context.Context, client *clientv3.Client, opts ...locker.Option) (locker.Locker, error) {
	if ctx == nil {
		return nil, &locker.Error{Op: "new", Backend: "etcd", Err: locker.ErrInvalidOption, Cause: errors.New("nil context.Context")}
	}
	if client == nil {
		return nil, &locker.Error{Op: "new", Backend: "etcd", Err: locker.ErrInvalidOption, Cause: errors.New("nil *clientv3.Client")}
	}
	if client.KV == nil || client.Lease == nil || client.Watcher == nil || client.Ctx() == nil {
		return nil, &locker.Error{Op: "new", Backend: "etcd", Err: locker.ErrInvalidOption, Cause: errors.New("zero clientv3.Client: make it with clientv3.New")}
	}
	dial := c.DialTimeout
	switch {
	case dial < 0:
		return nil, &locker.Error{Op: "new", Backend: "etcd", Err: locker.ErrInvalidOption, Cause: fmt.Errorf("Config.DialTimeout %v is negative", dial)}
	case dial == 0:
		dial = DefaultDialTimeout
	}
	return newLocker(ctx, client, dial, opts)
}

// New is Config{}.New: a Locker on client with the default settings.
func New(client *clientv3.Client, opts ...locker.Option) (locker.Locker, error) {
	return Config{}.New(client, opts...)
}

// NewContext is Config{}.NewContext.
func NewContext(ctx context.Context, client *clientv3.Client, opts ...locker.Option) (locker.Locker, error) {
	return Config{}.NewContext(ctx, client, opts...)
}

// newLocker is NewContext once its arguments are checked, with dial
// bounding the wait for a connection.
func newLocker(ctx context.Context, client *clientv3.Client, dial time.Duration, opts []locker.Option) (locker.Locker, error) {
	d := &etcdDriver{cli: client, sem: make(chan struct{}, 1), newCtx: ctx, dial: dial}
	return locker.New(d, opts...)
}

// Guard returns a comparison that holds while lk is still held: the
// holder's key exists with the create revision it was granted at. Put it in
// the If of your own transaction so that its writes land only while the lock
// is held, whatever happened since (an expired lease, a key deleted by hand):
//
//	cmp, err := etcd.Guard(lk)
//	resp, err := cli.Txn(ctx).If(cmp).Then(clientv3.OpPut("balance", "10")).Commit()
//	// resp.Succeeded is false once the lock was lost.
//
// Nested holds (inside Do) give the outer lock's comparison. It returns an
// error matching locker.ErrInvalidOption for a nil Lock or one not handed
// out by a Locker of this package.
func Guard(lk locker.Lock) (clientv3.Cmp, error) {
	if lk == nil {
		return clientv3.Cmp{}, &locker.Error{Op: "guard", Backend: "etcd", Err: locker.ErrInvalidOption, Cause: errors.New("nil Lock")}
	}
	s, _ := locker.DriverState(lk)
	st, ok := s.(*lockState)
	if !ok {
		return clientv3.Cmp{}, &locker.Error{Op: "guard", Backend: "etcd", Key: lk.Key(), Err: locker.ErrInvalidOption, Cause: errors.New("the Lock was not handed out by an etcd Locker")}
	}
	return clientv3.Compare(clientv3.CreateRevision(st.key), "=", st.rev), nil
}

// Dir returns the etcd key prefix under which the waiters of a store key
// live (the store key is the Locker's prefix followed by the caller's key):
// the key with '%' and NUL percent-encoded, then a NUL. The encoded key holds
// no NUL, so no key's directory is a prefix of another's. The waiter with the
// lowest create revision under it holds the lock. Operators can list or
// delete a lock's waiters with it.
func Dir(key string) string { return KeyPrefix(key) + "\x00" }

// KeyPrefix returns the etcd key prefix under which every lock of a Locker
// with prefix ([locker.WithPrefix]) lives: prefix with '%' and NUL
// percent-encoded, as in [Dir]. It differs from prefix only when prefix has
// a '%' or a NUL. Give a tenant's etcd role its range, and list its locks:
//
//	etcdctl role grant-permission tenant1 readwrite --prefix=true "$KEY_PREFIX"
//	etcdctl get --prefix "$KEY_PREFIX"
func KeyPrefix(prefix string) string {
	if strings.ContainsAny(prefix, "%\x00") {
		prefix = strings.NewReplacer("%", "%25", "\x00", "%00").Replace(prefix)
	}
	return prefix
}
