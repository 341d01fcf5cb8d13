//go:build !linux

package testenv

import (
	"errors"
	"syscall"
	"time"
)

// sysProcAttr returns nil: only Linux can tie a child's life to its parent,
// so elsewhere the servers of a killed test binary must be stopped by hand.
func sysProcAttr() *syscall.SysProcAttr { return nil }

// removeStaleDirs does nothing: without Pdeathsig the servers of a dead test
// binary may still be using their directories.
func removeStaleDirs() {}

// runAs fails: only the Linux harness switches accounts.
func runAs(_ *syscall.SysProcAttr, name string) error {
	return errors.New("cannot run a server as " + name + " on this system")
}

// processCPU fails: only the Linux harness reads a process's CPU time.
func processCPU(int) (time.Duration, error) {
	return 0, errors.New("the CPU time of a server process is read on Linux only")
}

// ChildrenOf returns none: only the Linux harness reads /proc.
func ChildrenOf(int) []int { return nil }
