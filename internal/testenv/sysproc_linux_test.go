//go:build linux

package testenv

import (
	"os"
	"testing"
	"time"
)

// TestProcessCPU: the CPU time read from /proc grows as the process works.
func TestProcessCPU(t *testing.T) {
	before, err := processCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	// Busy until the kernel counts a tick more; a loaded machine may take
	// a while to give us one.
	for deadline := time.Now().Add(30 * time.Second); ; {
		now, err := processCPU(os.Getpid())
		if err != nil {
			t.Fatal(err)
		}
		if now > before {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("processCPU stayed at %v through 30 s of work; want it to grow", now)
		}
	}
	if _, err := processCPU(-1); err == nil {
		t.Error("processCPU(-1) succeeded; want an error")
	}
}
