//go:build !unix

package contend

import "time"

// ProcessCPU returns the CPU time this process has used; ok is false when
// the system does not say, as here.
func ProcessCPU() (d time.Duration, ok bool) { return 0, false }
