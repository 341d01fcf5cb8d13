//go:build !unix

package sharedbench

import "time"

// processCPU returns the CPU time the process has used; ok is false when
// it cannot tell, as here.
func processCPU() (d time.Duration, ok bool) { return 0, false }
