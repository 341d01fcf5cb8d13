//go:build !linux

package testenv

import "syscall"

// sysProcAttr returns nil: only Linux can tie a child's life to its parent,
// so elsewhere the servers of a killed test binary must be stopped by hand.
func sysProcAttr() *syscall.SysProcAttr { return nil }

// removeStaleDirs does nothing: without Pdeathsig the servers of a dead test
// binary may still be using their directories.
func removeStaleDirs() {}
