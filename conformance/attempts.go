package conformance

import (
	"fmt"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golocker/locker"
	"github.com/golocker/locker/internal/rerun"
	"github.com/golocker/locker/internal/stall"
)

// caseAttempts is how many times Run runs a case at most. A failed attempt
// runs again only when the test process stalled while it ran (stall.Watch):
// a machine too busy to run a Locker's renewals in time loses its locks,
// as the contract allows, and such an attempt says nothing of the Locker.
// A case that fails without a stall fails at once.
const caseAttempts = 3

// runCase runs tc on t: each attempt in a goroutine of its own with a
// recorder, bounded by watchCase, then what the last attempt reported goes
// to t. The earlier attempts' reports are logged.
func runCase(t *testing.T, h Harness, tc testCase, stalls *stall.Watch) {
	t.Helper()
	ct := newCaseTB(t)
	attempt := func() *recorder {
		rec := &recorder{}
		c := &caseT{reporter: rec, t: ct, h: h, name: t.Name(), contract: tc.contract, slack: defaultSlack, stalls: stalls}
		watchCase(c, rec, tc.run)
		return rec
	}
	rec := attempts(caseAttempts, attempt, t.Failed, stalls.Longest, t.Logf)
	rec.replay(t)
}

// attempts calls attempt until an attempt passes or skips, or fails while
// the process did not stall (longest reports the longest stall between two
// times), with no failure that reported a lock lost only for want of a
// timely renewal (recorder.starved) and no key free only after its window
// (freedLate), or failed reports that the test failed outside the attempt
// (a hook's t.Fatal), or n attempts ran. It returns the last attempt's
// recorder, and logs each earlier one's.
func attempts(n int, attempt func() *recorder, failed func() bool, longest func(from, to time.Time) time.Duration, logf func(format string, args ...any)) *recorder {
	for i := 1; ; i++ {
		from := time.Now()
		rec := attempt()
		if !rec.failed || i == n || failed() {
			return rec
		}
		var why string
		if stall := longest(from, time.Now()); stall > 0 {
			why = fmt.Sprintf("while the test process stalled for up to %v, so the Lockers' renewals may have starved", stall.Round(time.Millisecond))
		} else if rec.starvedLoss() {
			why = "with a lock lost to renewals that did not succeed in time (a store too slow to answer, as on a loaded machine)"
		} else if rec.names(freedLate) {
			why = "with a key free only after its window (a store too slow to answer, as on a loaded machine)"
		} else {
			return rec
		}
		logf("attempt %d of %d failed %s: the case runs again; the attempt's report:\n%s", i, n, why, rec)
	}
}

// starvedLoss reports whether a failure the attempt recorded reported a
// lock lost only for want of a timely renewal (recorder.starved).
func (r *recorder) starvedLoss() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.starved
}

// names reports whether a failure the attempt recorded contains text
// (freedLate).
func (r *recorder) names(text string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, e := range r.log {
		if e.kind == "error" && strings.Contains(e.text, text) {
			return true
		}
	}
	return false
}

// startCase runs a case's function with c in a goroutine of its own, whose
// end (a return, Fatalf, Skipf, a hook's t.FailNow) closes the returned
// channel. A panic is recorded as a failure when c reports to a recorder.
func startCase(c *caseT, run func(*caseT)) <-chan struct{} {
	rec, _ := c.reporter.(*recorder)
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer func() {
			if p := recover(); p != nil && rec != nil {
				rec.add("error", 0, "panic: %v\n%s", p, debug.Stack())
				rec.mu.Lock()
				rec.fatal = true
				rec.mu.Unlock()
			}
		}()
		run(c)
	}()
	return done
}

// recorder is the reporter of a case's attempt: it records what the case
// reports, with the place in the case that reported it, instead of failing
// the test. Run replays the attempt that counts; the suite's own test reads
// it.
type recorder struct {
	mu      sync.Mutex
	failed  bool
	skipped bool
	fatal   bool // Fatalf ended the attempt
	// starved: a failure's arguments held a lock's loss at its local
	// deadline that wraps nothing but timeouts (rerun.StarvedLoss): a
	// store that answers renewals too slowly, as a loaded machine's does,
	// loses locks so, as the contract allows. A loss whose last renewal
	// the store answered with an error (refused, not authenticated) is
	// no such loss: a Locker or store fault shows so in every attempt.
	starved bool
	log     []entry
	helpers map[string]bool // functions that called Helper
}

// entry is one report of a case: its kind ("log", "error", "skip") and its
// text, prefixed with the file and line that made it.
type entry struct{ kind, text string }

// Helper marks its caller as a helper: a report names the place that
// called the helper, as testing.T does.
func (r *recorder) Helper() {
	var pc [1]uintptr
	if runtime.Callers(2, pc[:]) == 0 {
		return
	}
	f, _ := runtime.CallersFrames(pc[:]).Next()
	name := f.Function
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.helpers == nil {
		r.helpers = make(map[string]bool)
	}
	r.helpers[name] = true
}

// Logf records a log line.
func (r *recorder) Logf(format string, args ...any) { r.add("log", 1, format, args...) }

// Errorf records a failure.
func (r *recorder) Errorf(format string, args ...any) { r.add("error", 1, format, args...) }

// Fatalf records a failure and ends the attempt's goroutine.
func (r *recorder) Fatalf(format string, args ...any) {
	r.add("error", 1, format, args...)
	r.mu.Lock()
	r.fatal = true
	r.mu.Unlock()
	runtime.Goexit()
}

// Skipf records a skip and ends the attempt's goroutine.
func (r *recorder) Skipf(format string, args ...any) {
	r.add("skip", 1, format, args...)
	runtime.Goexit()
}

// add records a report; skip is the number of the recorder's frames
// between add and the reporting code (add's caller is frame 1). With skip
// 0, no place is named.
func (r *recorder) add(kind string, skip int, format string, args ...any) {
	text := fmt.Sprintf(format, args...)
	if skip > 0 {
		if at := r.caller(skip + 2); at != "" {
			text = at + ": " + text
		}
	}
	starved := kind == "error" && starvedArg(args)
	r.mu.Lock()
	defer r.mu.Unlock()
	switch kind {
	case "error":
		r.failed = true
		r.starved = r.starved || starved
	case "skip":
		r.skipped = true
	}
	r.log = append(r.log, entry{kind, text})
}

// starvedArg reports whether one of args is an error, or a list of
// errors, that says only that a lock was lost at its local deadline for
// want of a timely renewal (rerun.StarvedLoss).
func starvedArg(args []any) bool {
	for _, a := range args {
		switch v := a.(type) {
		case error:
			if rerun.StarvedLoss(v, locker.ErrLost, locker.ErrNoRenewal) != nil {
				return true
			}
		case []error:
			if starvedArg(anys(v)) {
				return true
			}
		}
	}
	return false
}

// anys returns errs as a list of any.
func anys(errs []error) []any {
	out := make([]any, len(errs))
	for i, e := range errs {
		out[i] = e
	}
	return out
}

// caller returns "file.go:line" of the first frame, skip frames above
// caller's caller, that is neither a helper nor generated code.
func (r *recorder) caller(skip int) string {
	var pcs [32]uintptr
	n := runtime.Callers(skip+1, pcs[:])
	frames := runtime.CallersFrames(pcs[:n])
	r.mu.Lock()
	defer r.mu.Unlock()
	for {
		f, more := frames.Next()
		if f.File != "" && f.File != "<autogenerated>" && !r.helpers[f.Function] {
			return fmt.Sprintf("%s:%d", filepath.Base(f.File), f.Line)
		}
		if !more {
			return ""
		}
	}
}

// replay reports to t what the attempt recorded, in order: its logs,
// failures and skip; a Fatalf ends the test there.
func (r *recorder) replay(t *testing.T) {
	t.Helper()
	r.mu.Lock()
	log, fatal := r.log, r.fatal
	r.mu.Unlock()
	for _, e := range log {
		switch e.kind {
		case "error":
			t.Error(e.text)
		case "skip":
			t.Skip(e.text)
		default:
			t.Log(e.text)
		}
	}
	if fatal {
		t.FailNow()
	}
}

// String returns the recorded reports, one per line, each after its kind.
func (r *recorder) String() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	lines := make([]string, len(r.log))
	for i, e := range r.log {
		lines[i] = e.kind + ": " + e.text
	}
	return strings.Join(lines, "\n")
}

// firstError returns the first failure recorded, after its kind, or "".
func (r *recorder) firstError() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, e := range r.log {
		if e.kind == "error" {
			return "error: " + e.text
		}
	}
	return ""
}
