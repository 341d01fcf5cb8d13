package zookeeper

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"
)

// watchEvents follows the session through the connection's events: when the
// session expires or a new one begins, the locks of the old one are lost;
// when the channel closes (the connection was closed), all are.
func (d *zkDriver) watchEvents() {
	defer d.wg.Done()
	for {
		select {
		case <-d.stop:
			return
		case ev, ok := <-d.events:
			if !ok {
				d.connClosed.Store(true)
				d.loseWhere(func(*hold) bool { return true }, ErrConnClosed)
				return
			}
			if ev.Type == zk.EventSession && ev.State == zk.StateHasSession {
				d.sessionGranted()
			}
			if ev.Type == zk.EventSession && (ev.State == zk.StateExpired || ev.State == zk.StateHasSession) {
				cur := d.conn.SessionID()
				d.loseWhere(func(h *hold) bool { return h.session != cur }, zk.ErrSessionExpired)
			}
		}
	}
}

// loseWhere ends the holds for which match is true and reports them lost.
func (d *zkDriver) loseWhere(match func(*hold) bool, cause error) {
	var lost []*hold
	d.mu.Lock()
	for h := range d.holds {
		if match(h) && h.end() {
			delete(d.holds, h)
			lost = append(lost, h)
		}
	}
	d.mu.Unlock()
	for _, h := range lost {
		h.lost(fmt.Errorf("session %#x: %w", h.session, cause))
	}
}

// janitor deletes orphaned nodes (waiters whose cleanup failed, creates
// still in flight when their caller gave up) every TTL/10 until Close.
// Releases whose outcome was unknown, and locks the engine gave up on, reach
// the store through Release, which the engine retries for them.
func (d *zkDriver) janitor() {
	defer d.wg.Done()
	t := time.NewTicker(max(d.ttl/10, 10*time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-d.stop:
			return
		case <-t.C:
			d.sweep(d.ctx)
		}
	}
}

// sweep makes one pass of the janitor, bounded by the cleanup timeout.
func (d *zkDriver) sweep(ctx context.Context) {
	d.mu.Lock()
	todo := d.orphans
	d.orphans = nil
	d.mu.Unlock()
	if len(todo) == 0 {
		return
	}
	if d.connClosed.Load() {
		d.logger.Warn("locker: zookeeper connection closed; its session's nodes go with it", "nodes", len(todo))
		return
	}
	// Creates still in flight are settled first.
	var ready, waiting []*orphan
	for _, o := range todo {
		if o.create == nil {
			ready = append(ready, o)
			continue
		}
		select {
		case r := <-o.create:
			if so := settleCreate(o.parent, o.guid, r); so != nil {
				ready = append(ready, so)
			}
		default:
			waiting = append(waiting, o)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, d.cleanupTimeout())
	defer cancel()
	var mu sync.Mutex
	failed := waiting
	sem := make(chan struct{}, sweepWorkers)
	var wg sync.WaitGroup
	for _, o := range ready {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			if err := d.deleteOrphan(ctx, o); err != nil {
				mu.Lock()
				failed = append(failed, o)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(failed) > 0 {
		d.mu.Lock()
		d.orphans = append(d.orphans, failed...)
		d.mu.Unlock()
	}
}

// Close implements driver.Driver: it stops the goroutines, makes a last
// attempt at deleting orphaned nodes when the session is up, and waits a
// bounded time for go-zookeeper calls still running in the background, and
// for its workers.
func (d *zkDriver) Close() error { return d.CloseContext(context.Background()) }

// CloseContext implements driver.ContextCloser: Close, giving up on the
// orphans and on the calls still running when ctx ends.
func (d *zkDriver) CloseContext(ctx context.Context) error {
	d.cancel()
	close(d.stop)
	d.wg.Wait()
	d.mu.Lock()
	for t := range d.keeps {
		t.Stop()
	}
	d.keeps = nil
	d.mu.Unlock()

	// Deletions still going on after their caller's ctx ended finish
	// first: the ones that fail become orphans for the last sweep.
	if err := waitIdle(ctx, &d.cleanups, d.cleanupTimeout()); err != nil {
		d.logger.Warn("locker: zookeeper node deletions still running when Close went on", "err", err)
	}
	d.mu.Lock()
	left := len(d.orphans)
	d.mu.Unlock()
	if left > 0 && !d.connClosed.Load() && d.conn.State() == zk.StateHasSession {
		sctx, cancel := context.WithTimeout(ctx, d.cleanupTimeout())
		d.sweep(sctx)
		cancel()
		d.mu.Lock()
		left = len(d.orphans)
		d.mu.Unlock()
	}
	if left > 0 {
		d.logger.Warn("locker: zookeeper nodes left for the session's end", "nodes", left)
	}

	err := waitIdle(ctx, &d.calls, d.cleanupTimeout())
	if err == nil {
		// The workers, idle or done, end at once.
		err = waitIdle(ctx, &d.workers, d.cleanupTimeout())
	}
	switch {
	case errors.Is(err, errWaitTimeout):
		d.logger.Warn("locker: zookeeper calls still running after Close; they end when the connection answers or gives up")
	case err != nil:
		d.logger.Warn("locker: zookeeper calls still running when Close had to return; they end when the connection answers or gives up")
	}
	return nil
}

// errWaitTimeout is waitGroup's error when its timeout passed.
var errWaitTimeout = errors.New("zookeeper: timed out")

// waitIdle waits for n to reach zero, at most timeout and until ctx ends;
// it returns errWaitTimeout or ctx's error when it gave up.
func waitIdle(ctx context.Context, n *tally, timeout time.Duration) error {
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-n.idle():
		return nil
	case <-t.C:
		return errWaitTimeout
	case <-ctx.Done():
		return ctx.Err()
	}
}
