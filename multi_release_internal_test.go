package locker

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golocker/locker/driver"
)

// notifyMultiDriver is a multiDriver that releases several keys in one
// call and tells subscribers when a key is freed.
type notifyMultiDriver struct {
	*multiDriver
	releases      atomic.Int64 // Release calls
	multiReleases atomic.Int64 // ReleaseMulti calls

	subMu sync.Mutex
	subs  map[string][]chan struct{}
}

func newNotifyMultiDriver() *notifyMultiDriver {
	return &notifyMultiDriver{multiDriver: &multiDriver{tableDriver: newTableDriver()}, subs: make(map[string][]chan struct{})}
}

func (d *notifyMultiDriver) Release(ctx context.Context, l driver.Lease) error {
	d.releases.Add(1)
	err := d.tableDriver.Release(ctx, l)
	d.freed(l.Key)
	return err
}

func (d *notifyMultiDriver) ReleaseMulti(ctx context.Context, ls []driver.Lease) ([]error, error) {
	d.multiReleases.Add(1)
	errs := make([]error, len(ls))
	for i, l := range ls {
		errs[i] = d.tableDriver.Release(ctx, l)
		d.freed(l.Key)
	}
	return errs, nil
}

func (d *notifyMultiDriver) Subscribe(_ context.Context, key string) (<-chan struct{}, func(), error) {
	ch := make(chan struct{}, 1)
	d.subMu.Lock()
	d.subs[key] = append(d.subs[key], ch)
	d.subMu.Unlock()
	return ch, func() {}, nil
}

// free deletes key whoever holds it and notifies its subscribers.
func (d *notifyMultiDriver) free(key string) {
	d.mu.Lock()
	delete(d.owners, key)
	d.mu.Unlock()
	d.freed(key)
}

func (d *notifyMultiDriver) freed(key string) {
	d.subMu.Lock()
	defer d.subMu.Unlock()
	for _, ch := range d.subs[key] {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// TestMultiUnlockOneCall checks that a MultiLock taken through a
// driver.MultiReleaser is released with one ReleaseMulti call.
func TestMultiUnlockOneCall(t *testing.T) {
	d := newNotifyMultiDriver()
	e := newTestEngine(t, d, WithTTL(time.Minute))
	m, err := LockMulti(t.Context(), e, []string{"a", "b", "c"})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
	if n, r := d.multiReleases.Load(), d.releases.Load(); n != 1 || r != 0 {
		t.Errorf("Unlock made %d ReleaseMulti and %d Release calls; want 1 and 0", n, r)
	}
	if n := d.held(); n != 0 {
		t.Errorf("%d keys still held after Unlock", n)
	}
	select {
	case <-m.Done():
	default:
		t.Error("Done still open after Unlock")
	}
}

// TestMultiWaitWoken checks that a waiting LockMulti whose one-operation
// attempt found a key held is woken by the key's release notification
// and takes the keys in one operation, instead of sleeping its backoff.
func TestMultiWaitWoken(t *testing.T) {
	d := newNotifyMultiDriver()
	d.owners["b"] = "someone else"
	// A backoff longer than the TTL: without a wake-up the wait would
	// give up at once and take the keys one by one.
	e := newTestEngine(t, d, WithTTL(time.Minute), WithBackoff(ConstantBackoff(time.Hour)))
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	res := make(chan error, 1)
	go func() {
		m, err := LockMulti(ctx, e, []string{"a", "b", "c"})
		if err == nil {
			err = m.Unlock(ctx)
		}
		res <- err
	}()
	// The wait has subscribed once it made a second attempt (or, without
	// the wake-up, gone one by one).
	for d.multi.Load() < 2 && d.tries.Load() == 0 {
		if !driver.Sleep(ctx, time.Millisecond) {
			t.Fatal("LockMulti made no second attempt")
		}
	}
	d.free("b")
	if err := <-res; err != nil {
		t.Fatal(err)
	}
	if n := d.tries.Load(); n != 0 {
		t.Errorf("LockMulti made %d TryAcquire calls: it took the keys one by one instead of being woken", n)
	}
}
