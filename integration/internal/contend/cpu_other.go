//go:build !unix

package contend

import "time"

// processCPU returns 0: the client CPU figures are not reported here.
func processCPU() time.Duration { return 0 }
