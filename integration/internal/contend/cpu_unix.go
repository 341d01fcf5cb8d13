//go:build unix

package contend

import (
	"syscall"
	"time"
)

// ProcessCPU returns the CPU time (user and system) this process has used
// so far; ok is false when the system does not say.
func ProcessCPU() (d time.Duration, ok bool) {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0, false
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), true
}
