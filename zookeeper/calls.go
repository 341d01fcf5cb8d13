package zookeeper

import (
	"context"
	"sync"
	"time"
)

// result is the outcome of a go-zookeeper call run in a worker.
type result[T any] struct {
	v   T
	err error
}

// cleanupTimeout bounds a cleanup done with a fresh context.
func (d *zkDriver) cleanupTimeout() time.Duration {
	return min(max(d.ttl, 500*time.Millisecond), 5*time.Second)
}

// cleanupContext is a context for cleaning up after ctx ended or failed: not
// cancelled with ctx, bounded by cleanupTimeout.
func (d *zkDriver) cleanupContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), d.cleanupTimeout())
}

// start runs f, a blocking go-zookeeper call, in a worker of d (see run)
// and returns the channel that receives its outcome.
func start[T any](d *zkDriver, f func() (T, error)) <-chan result[T] {
	ch := make(chan result[T], 1)
	d.run(func() {
		v, err := f()
		ch <- result[T]{v, err}
	})
	return ch
}

// tally counts work in progress, as a sync.WaitGroup does, and may count
// up again after someone waited for it to reach zero: Close waits a bounded
// time, and the calls and cleanups it gave up on may start others.
type tally struct {
	mu   sync.Mutex
	n    int
	zero chan struct{} // closed when n reaches 0; nil while nobody waits
}

// add counts one more.
func (t *tally) add() {
	t.mu.Lock()
	t.n++
	t.mu.Unlock()
}

// done counts one less.
func (t *tally) done() {
	t.mu.Lock()
	t.n--
	if t.n == 0 && t.zero != nil {
		close(t.zero)
		t.zero = nil
	}
	t.mu.Unlock()
}

// idle returns a channel that is closed once the count is zero.
func (t *tally) idle() <-chan struct{} {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.n == 0 {
		ch := make(chan struct{})
		close(ch)
		return ch
	}
	if t.zero == nil {
		t.zero = make(chan struct{})
	}
	return t.zero
}

// workerIdle is how long a worker waits for another call before it exits.
const workerIdle = 2 * time.Second

// run runs f in an idle worker when there is one, else in a new one, and
// counts it in d.calls while it runs. A worker waits for the next call
// once done, so that a busy Locker does not start a goroutine, and grow
// its stack, for every go-zookeeper call.
func (d *zkDriver) run(f func()) {
	d.calls.add()
	select {
	case d.work <- f:
		return
	default:
	}
	d.workers.add()
	go d.worker(f)
}

// worker runs f, then the calls handed to it on d.work, until it has
// waited workerIdle for one or Close stops it.
func (d *zkDriver) worker(f func()) {
	defer d.workers.done()
	var idle *time.Timer
	for {
		f()
		d.calls.done()
		if idle == nil {
			idle = time.NewTimer(workerIdle)
		} else {
			idle.Reset(workerIdle) // Go 1.23+: drops a pending tick
		}
		select {
		case f = <-d.work:
		case <-idle.C:
			return
		case <-d.stop:
			idle.Stop()
			return
		}
	}
}

// call runs f and returns its outcome, or ctx's error as soon as ctx ends:
// go-zookeeper calls cannot be cancelled, so f then finishes in the
// background and its outcome is dropped.
func call[T any](ctx context.Context, d *zkDriver, f func() (T, error)) (T, error) {
	if err := ctx.Err(); err != nil {
		var zero T
		return zero, err
	}
	select {
	case r := <-start(d, f):
		return r.v, r.err
	case <-ctx.Done():
		var zero T
		return zero, ctx.Err()
	}
}

// call0 is call for go-zookeeper calls that return only an error.
func call0(ctx context.Context, d *zkDriver, f func() error) error {
	_, err := call(ctx, d, func() (struct{}, error) { return struct{}{}, f() })
	return err
}
