//go:build linux || darwin || dragonfly || freebsd || netbsd || openbsd

package main

import (
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// cbreak turns off line buffering and echo on the terminal in, so that a
// single key reaches top; Ctrl-C still sends SIGINT. It returns the undo,
// which may be called more than once. It does nothing when in is not a
// terminal.
func cbreak(in *os.File) (restore func()) {
	fd := int(in.Fd())
	old, err := unix.IoctlGetTermios(fd, getTermios)
	if err != nil {
		return func() {}
	}
	t := *old
	t.Lflag &^= unix.ICANON | unix.ECHO
	t.Cc[unix.VMIN], t.Cc[unix.VTIME] = 1, 0
	if err := unix.IoctlSetTermios(fd, setTermios, &t); err != nil {
		return func() {}
	}
	return func() { _ = unix.IoctlSetTermios(fd, setTermios, old) }
}

// termSize is the size of the terminal w writes to; 24 by 80 when it is
// not one.
func termSize(w io.Writer) (rows, cols int) {
	if f, ok := w.(*os.File); ok {
		if ws, err := unix.IoctlGetWinsize(int(f.Fd()), unix.TIOCGWINSZ); err == nil && ws.Row > 0 && ws.Col > 0 {
			return int(ws.Row), int(ws.Col)
		}
	}
	return 24, 80
}
