package conformance

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/golocker/locker"
	"github.com/golocker/locker/memory"
)

// TestAttemptsRunAgainOnlyAfterAStall: a failed attempt runs again only
// when the process stalled while it ran and the test has not failed
// elsewhere, up to the number of attempts; the last attempt's recorder is
// the one that counts.
func TestAttemptsRunAgainOnlyAfterAStall(t *testing.T) {
	failing := func() *recorder {
		r := &recorder{}
		r.Errorf("lost")
		return r
	}
	passing := func() *recorder { return &recorder{} }
	unrenewed := func() *recorder {
		r := &recorder{}
		r.Errorf("the holder lost its lock (Err: %v)", fmt.Errorf("lock lost: %w", locker.ErrNoRenewal))
		return r
	}
	// refused: the lock was lost at its local deadline, its last renewal
	// refused by the store: a fault that shows in every attempt.
	refused := func() *recorder {
		r := &recorder{}
		r.Errorf("the holder lost its lock (Err: %v)", fmt.Errorf("hold k: %w: %w; last renewal error: %w", locker.ErrLost, locker.ErrNoRenewal, errors.New("not authenticated")))
		return r
	}
	// unrenewedText names the loss only in its text: no error says why.
	unrenewedText := func() *recorder {
		r := &recorder{}
		r.Errorf("the holder lost its lock (Err: %s)", fmt.Errorf("lock lost: %w", locker.ErrNoRenewal).Error())
		return r
	}
	// unrenewedJoined: the losses a case's goroutines collected, all
	// starved.
	unrenewedJoined := func() *recorder {
		r := &recorder{}
		loss := fmt.Errorf("hold k: %w: %w; last renewal error: %w", locker.ErrLost, locker.ErrNoRenewal, context.DeadlineExceeded)
		r.Errorf("2 failures, the first ones: %v", errors.Join(fmt.Errorf("Lock 1: %w", loss), fmt.Errorf("Lock 2: %w", loss)))
		return r
	}
	late := func() *recorder {
		r := &recorder{}
		r.Errorf("the key 1.2s after the heal: not acquired; %s, 1.4s after the heal", freedLate)
		return r
	}
	for _, tc := range []struct {
		name    string
		outcome []func() *recorder // the attempts' outcomes, the last repeated
		stall   time.Duration
		failed  bool // the test failed outside the attempt
		runs    int
		passed  bool
	}{
		{"a pass runs once", []func() *recorder{passing}, time.Second, false, 1, true},
		{"a failure without a stall runs once", []func() *recorder{failing}, 0, false, 1, false},
		{"a failure while stalled runs again", []func() *recorder{failing, passing}, 300 * time.Millisecond, false, 2, true},
		{"a lock lost unrenewed runs again", []func() *recorder{unrenewed, passing}, 0, false, 2, true},
		{"a lock lost unrenewed every time fails", []func() *recorder{unrenewed}, 0, false, 3, false},
		{"a lock lost unrenewed in a case's goroutines runs again", []func() *recorder{unrenewedJoined, passing}, 0, false, 2, true},
		{"a lock whose renewal was refused fails at once", []func() *recorder{refused, passing}, 0, false, 1, false},
		{"a lock lost unrenewed, said only in text, fails at once", []func() *recorder{unrenewedText, passing}, 0, false, 1, false},
		{"a key free only after its window runs again", []func() *recorder{late, passing}, 0, false, 2, true},
		{"a key free only after its window every time fails", []func() *recorder{late}, 0, false, 3, false},
		{"at most three attempts", []func() *recorder{failing}, 300 * time.Millisecond, false, 3, false},
		{"a hook's failure ends the attempts", []func() *recorder{failing}, time.Second, true, 1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			runs, logs := 0, 0
			attempt := func() *recorder {
				f := tc.outcome[min(runs, len(tc.outcome)-1)]
				runs++
				return f()
			}
			longest := func(from, to time.Time) time.Duration { return tc.stall }
			logf := func(format string, args ...any) {
				logs++
				if msg := fmt.Sprintf(format, args...); !strings.Contains(msg, "error: ") {
					t.Errorf("the log of a rerun attempt does not carry its report: %s", msg)
				}
			}
			rec := attempts(caseAttempts, attempt, func() bool { return tc.failed }, longest, logf)
			if runs != tc.runs {
				t.Errorf("%d attempts ran, want %d", runs, tc.runs)
			}
			if logs != runs-1 {
				t.Errorf("%d attempts were logged, want every one but the last (%d)", logs, runs-1)
			}
			if rec.failed == tc.passed {
				t.Errorf("the last attempt's recorder failed = %v, want %v", rec.failed, !tc.passed)
			}
		})
	}
}

// TestRecorderNamesTheReportingLine: a report names the line of the case
// that made it, above the helpers that marked themselves, as testing.T
// does; a Fatalf ends the attempt's goroutine and is replayed as fatal.
func TestRecorderNamesTheReportingLine(t *testing.T) {
	rec := &recorder{}
	c := &caseT{reporter: rec, t: newCaseTB(t)}
	var line int
	done := startCase(c, func(c *caseT) {
		_, _, line, _ = runtime.Caller(0)
		reportingHelper(c) // the line a report must name: line+1
		c.Errorf("not reached")
	})
	<-done
	want := fmt.Sprintf("attempts_internal_test.go:%d: ", line+1)
	if len(rec.log) != 2 || !strings.HasPrefix(rec.log[0].text, want) || !strings.HasPrefix(rec.log[1].text, want) {
		t.Fatalf("recorded %q, want a log and a failure, each after %q", rec.log, want)
	}
	if !rec.failed || !rec.fatal {
		t.Errorf("failed = %v, fatal = %v after a Fatalf, want both", rec.failed, rec.fatal)
	}
}

func reportingHelper(c *caseT) {
	c.Helper()
	c.Logf("a log")
	c.Fatalf("a failure")
}

// TestRefusedRenewalFailsInTheFirstAttempt runs Renewal as Run does (one
// attempt after another) against the renewRefused Locker, with no stall:
// its lock is lost at the local deadline, its last renewal refused by the
// store. That loss names locker.ErrNoRenewal, yet it is no starved loss:
// the case must fail in its first attempt, not run again.
func TestRefusedRenewalFailsInTheFirstAttempt(t *testing.T) {
	h := brokenHarness(newMemEnv(testTTL), renewRefused)
	tc := caseNamed(t, "Renewal")
	runs := 0
	attempt := func() *recorder {
		runs++
		rec, finished := runRecorded(t, h, tc, "Self/"+renewRefused+"/Renewal", time.Minute, nil)
		if !finished {
			t.Fatalf("attempt %d of Renewal did not finish within a minute", runs)
		}
		return rec
	}
	noStall := func(from, to time.Time) time.Duration { return 0 }
	rec := attempts(caseAttempts, attempt, t.Failed, noStall, t.Logf)
	if !rec.failed {
		t.Fatalf("Renewal passed against a Locker whose renewals the store refuses:\n%s", rec)
	}
	if !strings.Contains(rec.String(), locker.ErrNoRenewal.Error()) || !strings.Contains(rec.String(), memory.ErrUnreachable.Error()) {
		t.Fatalf("the failure does not report a lock lost at its local deadline after a refused renewal:\n%s", rec)
	}
	if runs != 1 {
		t.Errorf("Renewal ran %d attempts against a Locker whose renewals the store refuses, want 1: a refused renewal shows in every attempt", runs)
	}
}
