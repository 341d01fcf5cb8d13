//go:build !linux

package testenv

import (
	"errors"
	"syscall"
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
