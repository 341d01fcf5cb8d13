package conformance

import (
	"bytes"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/golocker/locker"
)

// lateChildEnv makes TestHungAttemptLateCalls run its scenario, in the
// child process it starts.
const lateChildEnv = "LOCKER_CONFORMANCE_LATE_CHILD"

// TestHungAttemptLateCalls runs, in a child process, an attempt that hangs
// and, once its test completed, calls a hook that logs and starts a
// goroutine that reports a failure through the test it was given, as a
// harness's proxy or server watcher might. testing panics on a failure
// reported to a completed test, and the panic of a goroutine ends the
// test binary: the child must pass, with the late calls made.
func TestHungAttemptLateCalls(t *testing.T) {
	if os.Getenv(lateChildEnv) != "" {
		lateCallsChild(t)
		return
	}
	t.Parallel()
	cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^TestHungAttemptLateCalls$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), lateChildEnv+"=1")
	out, err := cmd.CombinedOutput()
	if err != nil || bytes.Contains(out, []byte("panic")) {
		t.Fatalf("a hung attempt's late calls of its completed test ended the test binary (%v):\n%s", err, out)
	}
	if !bytes.Contains(out, []byte("late calls made")) {
		t.Fatalf("the child made no late call:\n%s", out)
	}
}

// lateCallsChild is the scenario of TestHungAttemptLateCalls.
func lateCallsChild(t *testing.T) {
	release, made := make(chan struct{}), make(chan struct{})
	h := Harness{TTL: 10 * time.Millisecond, NewLocker: func(tb testing.TB) locker.Locker {
		tb.Logf("a hook's log after its case ended")
		go func() {
			defer close(made)
			tb.Errorf("a hook's failure, from a goroutine of its own, after its case ended")
		}()
		return nil
	}}
	var rec *recorder
	t.Run("hung", func(t *testing.T) {
		rec = &recorder{}
		c := &caseT{reporter: rec, t: newCaseTB(t), h: h, name: t.Name(), contract: "late calls"}
		watchCase(c, rec, func(c *caseT) {
			<-release
			c.newLocker()
		})
	})
	if !rec.fatal {
		t.Errorf("the attempt did not end as hung: %s", rec)
	}
	close(release)
	select {
	case <-made:
	case <-time.After(time.Minute):
		t.Fatal("the hung attempt made no late call within a minute")
	}
	t.Log("late calls made")
}
