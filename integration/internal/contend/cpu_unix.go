//go:build unix

package contend

import (
	"syscall"
	"time"
)

// processCPU returns the CPU time (user and system) this process has used
// so far, or 0 when the system does not say.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
