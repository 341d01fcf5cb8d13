package conformance

import (
	"bytes"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// budget is the time a case's attempt has given itself so far: the latest
// deadline of the contexts it made (caseT.ctx), or a first allowance for
// the calls it makes before it makes one.
type budget struct {
	mu    sync.Mutex
	until time.Time
}

// extend moves the budget's end to t when t is later.
func (b *budget) extend(t time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if t.After(b.until) {
		b.until = t
	}
}

// end returns the budget's end.
func (b *budget) end() time.Time {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.until
}

// hangMargin is how long past its budget an attempt may run before it
// counts as hung: every call must return promptly once its ctx ends, and
// a case's last calls (a release with a ctx that does not end, cleanups)
// take a few store calls more. The margin only bounds a hang, so it is
// generous.
func (c *caseT) hangMargin() time.Duration { return 2*c.h.TTL + 2*c.slack }

// watchCase runs run with c as startCase does, and returns when it ends,
// or once it has run hangMargin past its budget, plus the longest stall
// of the process meanwhile (c.stalls; nil when none is measured). A hung
// attempt is recorded as a failure that ends it, naming the case and the
// call its goroutine is stuck in; its goroutine is left to its call.
func watchCase(c *caseT, rec *recorder, run func(*caseT)) {
	start := time.Now()
	c.budget = &budget{until: start.Add(c.within(2))}
	ids := make(chan uint64, 1)
	done := startCase(c, func(c *caseT) {
		ids <- goroutineID()
		run(c)
	})
	id := <-ids
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		stall := c.stalls.Longest(start, time.Now())
		end := c.budget.end()
		wait := time.Until(end.Add(c.hangMargin() + stall))
		if wait <= 0 {
			rec.add("error", 0, "case %s did not return %v after its last deadline (%v after it began, the process stalled for up to %v): %s",
				c.name, time.Since(end).Round(time.Millisecond), time.Since(start).Round(time.Millisecond), stall.Round(time.Millisecond), stuckIn(id))
			rec.mu.Lock()
			rec.fatal = true
			rec.mu.Unlock()
			return
		}
		timer.Reset(wait)
		select {
		case <-done:
			return
		case <-timer.C:
		}
	}
}

// goroutineID returns the id of the calling goroutine, as its stack
// trace names it.
func goroutineID() uint64 {
	var buf [64]byte
	s := buf[:runtime.Stack(buf[:], false)]
	s = bytes.TrimPrefix(s, []byte("goroutine "))
	var id uint64
	for _, b := range s {
		if b < '0' || b > '9' {
			break
		}
		id = id*10 + uint64(b-'0')
	}
	return id
}

// stuckIn describes where goroutine id is: the call of the suite's
// innermost frame that has not returned, then the goroutine's stack.
func stuckIn(id uint64) string {
	buf := make([]byte, 1<<20)
	n := runtime.Stack(buf, true)
	for n == len(buf) && len(buf) < 1<<26 {
		buf = make([]byte, 2*len(buf))
		n = runtime.Stack(buf, true)
	}
	all := string(buf[:n])
	head := fmt.Sprintf("goroutine %d [", id)
	var stack string
	for _, g := range strings.Split(all, "\n\n") {
		if strings.HasPrefix(g, head) {
			stack = g
			break
		}
	}
	if stack == "" {
		return "its goroutine ended meanwhile"
	}
	// The stack alternates a function's line and its "\tfile:line" line,
	// innermost first, after the goroutine's own line.
	lines := strings.Split(stack, "\n")
	state := strings.TrimSuffix(strings.TrimPrefix(lines[0], head), "]:")
	callee := ""
	for i := 1; i+1 < len(lines); i += 2 {
		fn, at := lines[i], strings.TrimSpace(lines[i+1])
		if file, _, _ := strings.Cut(at, " "); strings.Contains(fn, "/conformance.") && !strings.HasSuffix(strings.Split(file, ":")[0], "_test.go") && !strings.Contains(fn, "conformance.watchCase") {
			short := file[strings.LastIndex(file, "/")+1:]
			if callee == "" {
				return fmt.Sprintf("it waits at %s (%s); its stack:\n%s", short, state, stack)
			}
			return fmt.Sprintf("the call to %s at %s did not return (%s); its stack:\n%s", callee, short, state, stack)
		}
		if i := strings.LastIndex(fn, "("); i > 0 && !strings.HasPrefix(fn, "runtime.") && !strings.HasPrefix(fn, "sync.") && !strings.HasPrefix(fn, "internal/") {
			callee = fn[:i]
		}
	}
	return "its stack:\n" + stack
}

// caseTB is the testing.TB of a case's attempts, which the harness's hooks
// get: it passes every call on to the case's test until the test's
// cleanups have run. From then on the test has completed, and testing
// panics on a failure or, once its parents completed too, a log: a hung
// attempt (watchCase) goes on in its goroutine, and a hook it calls late,
// or a goroutine such a hook started, would end the test binary. So its
// logs and failures are dropped then, its Fatal and Skip end the calling
// goroutine, and its Cleanup runs the function at once.
type caseTB struct {
	*testing.T
	mu    sync.RWMutex
	ended bool // the test's cleanups have run
}

// newCaseTB returns the caseTB of t. It marks the end of t in a cleanup
// registered first, which runs after every other cleanup of t.
func newCaseTB(t *testing.T) *caseTB {
	c := &caseTB{T: t}
	t.Cleanup(func() {
		c.mu.Lock()
		c.ended = true
		c.mu.Unlock()
	})
	return c
}

// live calls f while the test has not completed, and reports whether it
// did; f runs under the read lock, so the test cannot complete meanwhile.
func (c *caseTB) live(f func()) bool {
	c.T.Helper()
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.ended {
		return false
	}
	f()
	return true
}

// Log implements testing.TB.
func (c *caseTB) Log(args ...any) {
	c.T.Helper()
	c.live(func() { c.T.Helper(); c.T.Log(args...) })
}

// Logf implements testing.TB.
func (c *caseTB) Logf(format string, args ...any) {
	c.T.Helper()
	c.live(func() { c.T.Helper(); c.T.Logf(format, args...) })
}

// Error implements testing.TB.
func (c *caseTB) Error(args ...any) {
	c.T.Helper()
	c.live(func() { c.T.Helper(); c.T.Error(args...) })
}

// Errorf implements testing.TB.
func (c *caseTB) Errorf(format string, args ...any) {
	c.T.Helper()
	c.live(func() { c.T.Helper(); c.T.Errorf(format, args...) })
}

// Fail implements testing.TB.
func (c *caseTB) Fail() { c.live(c.T.Fail) }

// FailNow implements testing.TB.
func (c *caseTB) FailNow() { c.stop(c.T.FailNow) }

// Fatal implements testing.TB.
func (c *caseTB) Fatal(args ...any) {
	c.T.Helper()
	c.stop(func() { c.T.Helper(); c.T.Fatal(args...) })
}

// Fatalf implements testing.TB.
func (c *caseTB) Fatalf(format string, args ...any) {
	c.T.Helper()
	c.stop(func() { c.T.Helper(); c.T.Fatalf(format, args...) })
}

// Skip implements testing.TB.
func (c *caseTB) Skip(args ...any) {
	c.T.Helper()
	c.stop(func() { c.T.Helper(); c.T.Skip(args...) })
}

// Skipf implements testing.TB.
func (c *caseTB) Skipf(format string, args ...any) {
	c.T.Helper()
	c.stop(func() { c.T.Helper(); c.T.Skipf(format, args...) })
}

// SkipNow implements testing.TB.
func (c *caseTB) SkipNow() { c.stop(c.T.SkipNow) }

// stop calls f, which ends the calling goroutine, while the test has not
// completed, and ends the calling goroutine itself otherwise.
func (c *caseTB) stop(f func()) {
	c.T.Helper()
	c.live(f)
	runtime.Goexit()
}

// Cleanup implements testing.TB: once the test's cleanups have run, f
// runs at once.
func (c *caseTB) Cleanup(f func()) {
	if !c.live(func() { c.T.Cleanup(f) }) {
		f()
	}
}
