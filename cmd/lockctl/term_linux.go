package main

import "golang.org/x/sys/unix"

// The termios requests of this system.
const (
	getTermios = unix.TCGETS
	setTermios = unix.TCSETS
)
