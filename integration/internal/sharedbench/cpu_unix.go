//go:build unix

package sharedbench

import (
	"syscall"
	"time"
)

// processCPU returns the CPU time the process has used, user and system;
// ok is false when it cannot tell.
func processCPU() (d time.Duration, ok bool) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, false
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), true
}
