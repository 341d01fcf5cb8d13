package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestRun runs the example and checks the metrics it prints: three
// acquisitions (one a hand-off), one loss.
func TestRun(t *testing.T) {
	var out bytes.Buffer
	if err := run(&out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`locker_lock_acquisitions_total{locker_backend="memory",locker_handoff="true",locker_outcome="acquired"`,
		`locker_lock_losses_total{locker_backend="memory",locker_cause="renewal_refused"`,
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the output lacks %s:\n%s", want, out.String())
		}
	}
}
