package zookeeper

import (
	"context"
	"errors"
	"reflect"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/golocker/locker/driver"
)

// multiChurnPause is how long a waiting LockMulti pauses when its attempt
// failed with no lock node to watch: lock nodes came and went between its
// listings and its writes, twice.
const multiChurnPause = 10 * time.Millisecond

// AcquireMulti implements driver.MultiWaiter: a waiting LockMulti makes
// attempts of TryAcquireMulti and, between them, holds nothing and has no
// node in any queue. An attempt that finds keys held watches the last lock
// node of each held key's queue; the next attempt comes when a watched
// node goes or changes, when the key may be free. A watch holds up nobody.
// Lock nodes that joined a queue after its listing are seen by the next
// attempt. The wait takes no place in the keys' queues: their waiters go
// first.
func (d *zkDriver) AcquireMulti(ctx context.Context, reqs []driver.Request) ([]driver.Grant, error) {
	// The watches set and not fired yet, by node path.
	watches := map[string]<-chan zk.Event{}
	for attempt := 0; ; attempt++ {
		gs, blockers, err := d.tryMulti(ctx, reqs)
		if err == nil {
			for i := range gs {
				gs[i].Queued = attempt > 0
			}
			return gs, nil
		}
		if !errors.Is(err, driver.ErrHeld) {
			return nil, classify(err)
		}
		if len(blockers) == 0 {
			if !driver.Sleep(ctx, driver.Jitter(multiChurnPause)) {
				return nil, ctx.Err()
			}
			continue
		}
		switch err := d.watchAll(ctx, watches, blockers...); {
		case errors.Is(err, zk.ErrNoNode):
			continue // gone already: try again
		case err != nil:
			return nil, classify(err)
		}
		if !awaitAny(ctx, watches) {
			return nil, ctx.Err()
		}
	}
}

// awaitAny waits until one of watches fires, and drops it; it reports
// false when ctx ended first.
func awaitAny(ctx context.Context, watches map[string]<-chan zk.Event) bool {
	paths := make([]string, 0, len(watches))
	cases := make([]reflect.SelectCase, 0, len(watches)+1)
	for p, ch := range watches {
		paths = append(paths, p)
		cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(ch)})
	}
	cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(ctx.Done())})
	i, _, _ := reflect.Select(cases)
	if i == len(paths) {
		return false
	}
	delete(watches, paths[i])
	return true
}
