package locker

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"

	"github.com/golocker/locker/driver"
)

// lossDriver is a tableDriver that keeps each grant's Lost callback, so a
// test can report a loss the way a driver's watch does.
type lossDriver struct {
	*tableDriver
	mu   sync.Mutex
	lost map[string]func(error)
}

func (d *lossDriver) TryAcquire(ctx context.Context, r driver.Request) (driver.Grant, error) {
	g, err := d.tableDriver.TryAcquire(ctx, r)
	if err == nil {
		d.mu.Lock()
		d.lost[r.Key] = r.Lost
		d.mu.Unlock()
	}
	return g, err
}

func (d *lossDriver) lose(key string) { d.loseWith(key, driver.ErrNotHeld) }

// loseWith reports key's loss with cause, as the driver's watch would.
func (d *lossDriver) loseWith(key string, cause error) {
	d.mu.Lock()
	f := d.lost[key]
	d.mu.Unlock()
	f(cause)
}

// isClosed reports whether ch is closed, without waiting.
func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// waitGroupDone returns a channel closed once wg is done.
func waitGroupDone(wg *sync.WaitGroup) <-chan struct{} {
	ch := make(chan struct{})
	go func() { wg.Wait(); close(ch) }()
	return ch
}

// TestDoneConcurrentWithEnd: Done called by several goroutines at once
// with the hold's end (an Unlock, a loss the driver reports, or both)
// returns one channel to all of them, closed once the end returns; Err is
// set when a caller wakes on that channel closing; a Done called after the end
// returns a closed channel, the one the others got. The channel is made when first asked for, so
// these calls race with the end storing or closing it.
func TestDoneConcurrentWithEnd(t *testing.T) {
	d := &lossDriver{tableDriver: newTableDriver(), lost: make(map[string]func(error))}
	e := newTestEngine(t, d)
	ctx := context.Background()
	const callers = 4
	iterations := 600
	if testing.Short() {
		iterations = 100
	}
	for i := range iterations {
		mode := i % 3 // 0: Unlock, 1: loss, 2: both at once
		key := "k" + strconv.Itoa(i)
		lk, err := e.TryLock(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		start := make(chan struct{})
		var (
			wg    sync.WaitGroup
			chans [callers]<-chan struct{}
			errs  [callers]error
		)
		for c := range callers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				chans[c] = lk.Done()
				// Err right after the close wakes this caller.
				<-chans[c]
				errs[c] = lk.Err()
			}()
		}
		var ender sync.WaitGroup
		if mode != 1 {
			ender.Add(1)
			go func() {
				defer ender.Done()
				<-start
				// A loss at the same moment may make the release fail.
				if err := lk.Unlock(ctx); err != nil && mode == 0 {
					t.Errorf("Unlock: %v", err)
				}
			}()
		}
		if mode != 0 {
			ender.Add(1)
			go func() {
				defer ender.Done()
				<-start
				d.lose(key)
			}()
		}
		close(start)
		ender.Wait()
		// The end has returned: Done is closed now, whoever asks.
		after := lk.Done()
		if !isClosed(after) {
			t.Fatalf("iteration %d (mode %d): Done after the end returned is not closed", i, mode)
		}
		final := lk.Err()
		switch {
		case mode == 0 && final != nil:
			t.Fatalf("iteration %d: Err after Unlock = %v, want nil", i, final)
		case mode == 1 && !errors.Is(final, ErrLost):
			t.Fatalf("iteration %d: Err after the loss = %v, want ErrLost", i, final)
		}
		await(t, waitGroupDone(&wg), "Done callers did not return after the end")
		for c := range callers {
			if chans[c] != chans[0] {
				t.Fatalf("iteration %d (mode %d): concurrent Done calls returned different channels", i, mode)
			}
			if !isClosed(chans[c]) {
				t.Fatalf("iteration %d (mode %d): a Done channel asked for during the end is not closed after it", i, mode)
			}
			if errs[c] != final {
				t.Fatalf("iteration %d (mode %d): Err was %v when Done was seen closed, and %v later", i, mode, errs[c], final)
			}
		}
		if chans[0] != after {
			t.Fatalf("iteration %d (mode %d): Done returned another channel after the end than during it", i, mode)
		}
	}
}
