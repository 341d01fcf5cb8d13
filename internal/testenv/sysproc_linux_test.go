//go:build linux

package testenv

import (
	"os"
	"os/exec"
	"slices"
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

// TestChildrenOf checks that ChildrenOf lists a process this test started,
// and nothing for a process with no children.
func TestChildrenOf(t *testing.T) {
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	if kids := ChildrenOf(os.Getpid()); !slices.Contains(kids, cmd.Process.Pid) {
		t.Errorf("ChildrenOf(%d) = %v, want it to hold the child %d", os.Getpid(), kids, cmd.Process.Pid)
	}
	if kids := ChildrenOf(cmd.Process.Pid); len(kids) != 0 {
		t.Errorf("ChildrenOf(%d) = %v for a sleep, want none", cmd.Process.Pid, kids)
	}
}
