package conformance

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golocker/locker"
	"github.com/golocker/locker/driver"
)

// sessionSetup is how long a sessionDriver's attempt to set up its session
// takes while the store does not answer, whatever its ctx: far past
// PromptCancel's bound at testTTL.
const sessionSetup = 3 * time.Second

// errCut is the error of a sessionDriver cut off from its store.
var errCut = errors.New("session driver: cut off from the store")

// sessionStore is the map a sessionDriver keeps its locks in.
type sessionStore struct {
	mu     sync.Mutex
	owners map[string]string
	seq    uint64
}

// sessionDriver is a driver whose first calls set up a session: while the
// store does not answer, each waits out a timeout of its own, ignoring its
// ctx. With prompt it claims Info.PromptCancel all the same: a false
// promise.
type sessionDriver struct {
	store  *sessionStore
	prompt bool
	ready  atomic.Bool // the session is set up
	cut    atomic.Bool
}

func (d *sessionDriver) Info() driver.Info {
	return driver.Info{Name: "session", PromptCancel: d.prompt}
}

// call sets the session up when it is not, then fails when cut.
func (d *sessionDriver) call(ctx context.Context) error {
	if !d.ready.Load() {
		if d.cut.Load() {
			time.Sleep(sessionSetup)
			return errCut
		}
		d.ready.Store(true)
	}
	if d.cut.Load() {
		return errCut
	}
	return ctx.Err()
}

func (d *sessionDriver) TryAcquire(ctx context.Context, r driver.Request) (driver.Grant, error) {
	if err := d.call(ctx); err != nil {
		return driver.Grant{}, err
	}
	s := d.store
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.owners[r.Key]; ok {
		return driver.Grant{}, driver.Held(r.TTL)
	}
	s.seq++
	s.owners[r.Key] = r.Owner
	return driver.Grant{Token: s.seq}, nil
}

func (d *sessionDriver) Renew(ctx context.Context, l driver.Lease) (time.Duration, error) {
	if err := d.call(ctx); err != nil {
		return 0, err
	}
	s := d.store
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.owners[l.Key] != l.Owner {
		return 0, driver.ErrNotHeld
	}
	return l.TTL, nil
}

func (d *sessionDriver) Release(ctx context.Context, l driver.Lease) error {
	if err := d.call(ctx); err != nil {
		return err
	}
	s := d.store
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.owners[l.Key] != l.Owner {
		return driver.ErrNotHeld
	}
	delete(s.owners, l.Key)
	return nil
}

func (d *sessionDriver) Close() error { return nil }

// sessionHarness is a harness of Lockers on sessionDrivers sharing one
// store, which promise PromptCancel when prompt is set.
func sessionHarness(prompt bool) Harness {
	store := &sessionStore{owners: make(map[string]string)}
	var mu sync.Mutex
	drivers := make(map[locker.Locker]*sessionDriver)
	return Harness{
		TTL: testTTL,
		NewLocker: func(t testing.TB) locker.Locker {
			d := &sessionDriver{store: store, prompt: prompt}
			l, err := locker.New(d, locker.WithTTL(testTTL))
			if err != nil {
				t.Errorf("locker.New: %v", err)
				return nil
			}
			mu.Lock()
			drivers[l] = d
			mu.Unlock()
			return l
		},
		Isolate: func(t testing.TB, l locker.Locker) func() {
			mu.Lock()
			d := drivers[l]
			mu.Unlock()
			d.cut.Store(true)
			return func() { d.cut.Store(false) }
		},
	}
}

// TestPromptCancelChecksThePromise runs PromptCancel on Lockers whose
// driver's first call ignores its ctx: the engine makes up for it when the
// driver promises nothing, and PromptCancel catches a driver that promises
// PromptCancel falsely.
func TestPromptCancelChecksThePromise(t *testing.T) {
	t.Parallel()
	const limit = 60 * time.Second
	tc := caseNamed(t, "PromptCancel")
	var (
		wg               sync.WaitGroup
		honest, liar     *recorder
		honestOK, liarOK bool
	)
	wg.Add(2)
	go func() {
		defer wg.Done()
		honest, honestOK = runRecorded(t, sessionHarness(false), tc, "Self/sessionDetached/PromptCancel", limit, nil)
	}()
	go func() {
		defer wg.Done()
		liar, liarOK = runRecorded(t, sessionHarness(true), tc, "Self/falsePromptCancel/PromptCancel", limit, nil)
	}()
	wg.Wait()
	switch {
	case !honestOK:
		t.Errorf("without the promise: the case did not finish within %v; its log so far:\n%s", limit, honest)
	case honest.failed || honest.skipped:
		t.Errorf("without the promise, the engine detaches the slow first calls, and the case must pass:\n%s", honest)
	}
	switch {
	case !liarOK:
		t.Errorf("with a false promise: the case did not finish within %v; its log so far:\n%s", limit, liar)
	case !liar.failed:
		t.Errorf("the case did not catch a driver that claims PromptCancel and ignores its first call's ctx; its log:\n%s", liar)
	default:
		t.Logf("caught the false promise: %s", liar.firstError())
	}
}
