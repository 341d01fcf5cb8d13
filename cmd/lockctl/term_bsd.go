//go:build darwin || dragonfly || freebsd || netbsd || openbsd

package main

import "golang.org/x/sys/unix"

// The termios requests of this system.
const (
	getTermios = unix.TIOCGETA
	setTermios = unix.TIOCSETA
)
