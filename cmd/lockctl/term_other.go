//go:build unix && !(linux || darwin || dragonfly || freebsd || netbsd || openbsd)

package main

import (
	"io"
	"os"
)

// cbreak does nothing here: q must be followed by Enter.
func cbreak(*os.File) (restore func()) { return func() {} }

// termSize is 24 by 80 here.
func termSize(io.Writer) (rows, cols int) { return 24, 80 }
