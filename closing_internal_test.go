package locker

import (
	"context"
	"testing"

	"github.com/golocker/locker/driver"
)

// closingDriver is a tableDriver that keeps its driver.Config and the ctx
// of its last TryAcquire.
type closingDriver struct {
	*tableDriver
	cfg  driver.Config
	last context.Context
}

func (d *closingDriver) Configure(_ context.Context, cfg driver.Config) error {
	d.cfg = cfg
	return nil
}

func (d *closingDriver) TryAcquire(ctx context.Context, r driver.Request) (driver.Grant, error) {
	d.last = ctx
	return d.tableDriver.TryAcquire(ctx, r)
}

// TestClosingIsTheCallContextOfANeverEndingCaller: driver.Config.Closing
// ends at Close and not before, and a caller whose ctx never ends makes
// its store calls with a ctx whose Done is Closing's.
func TestClosingIsTheCallContextOfANeverEndingCaller(t *testing.T) {
	d := &closingDriver{tableDriver: newTableDriver()}
	d.prompt = true
	e := newTestEngine(t, d)
	if d.cfg.Closing == nil {
		t.Fatal("driver.Config.Closing is nil: the engine must always set it")
	}
	type valueKey struct{}
	for _, ctx := range []context.Context{context.Background(), context.WithValue(context.Background(), valueKey{}, 1)} {
		lk, err := e.TryLock(ctx, "k")
		if err != nil {
			t.Fatal(err)
		}
		if d.last.Done() != d.cfg.Closing.Done() {
			t.Errorf("a TryLock whose ctx never ends made its store call with a ctx whose Done is not driver.Config.Closing's")
		}
		if err := lk.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.TryLock(t.Context(), "k"); err != nil {
		t.Fatal(err)
	}
	if d.last.Done() == d.cfg.Closing.Done() {
		t.Error("a TryLock whose ctx can end made its store call with driver.Config.Closing's Done")
	}
	if d.cfg.Closing.Err() != nil {
		t.Fatal("driver.Config.Closing ended before Close")
	}
	_ = e.Close()
	if d.cfg.Closing.Err() == nil {
		t.Error("driver.Config.Closing did not end at Close")
	}
}
