// Package leakcheck finds goroutines that outlived the tests of a package:
// every test binary of this repository checks, after its tests, that every
// Locker, client, server and proxy it made is gone. It needs the standard
// library only, so that the root module's tests depend on nothing else.
package leakcheck

import (
	"bytes"
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"
)

// settle bounds how long Find waits for goroutines that are still ending.
const settle = 5 * time.Second

// framework marks the goroutines of the runtime, the testing package and
// signal handling, which outlive every test by design.
var framework = []string{
	"testing.(*M).",
	"testing.(*T).Run(",
	"testing.(*F).Fuzz(",
	"testing.RunTests(",
	"testing.runTests(",
	"testing.tRunner(",
	"os/signal.signal_recv(",
	"os/signal.loop(",
	"runtime.ensureSigM(",
	"runtime/trace.",
	"runtime.ReadTrace(",
}

// Find returns an error listing the goroutines, other than the caller's and
// the framework's, still running once settle has passed; nil when none is.
func Find() error {
	deadline := time.Now().Add(settle)
	for wait := time.Millisecond; ; wait = min(2*wait, 100*time.Millisecond) {
		leaked := Others()
		if len(leaked) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d goroutines outlived the tests:\n\n%s", len(leaked), strings.Join(leaked, "\n\n"))
		}
		time.Sleep(wait)
	}
}

// Main runs m's tests and then Find, and exits with the tests' exit code, or
// 1 when they passed but leaked goroutines:
//
//	func TestMain(m *testing.M) { leakcheck.Main(m) }
func Main(m *testing.M) {
	os.Exit(Code(m.Run()))
}

// Code returns code, or 1 (after printing the leak to standard error) when
// code is 0 and Find finds goroutines: for a TestMain that does more after
// its tests before it exits.
func Code(code int) int {
	if code != 0 {
		return code
	}
	if err := Find(); err != nil {
		fmt.Fprintf(os.Stderr, "leakcheck: %v\n", err)
		return 1
	}
	return 0
}

// Others returns the stacks of every goroutine but the caller's and the
// framework's.
func Others() []string {
	buf := make([]byte, 1<<16)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	stacks := bytes.Split(buf, []byte("\n\n"))
	var out []string
	for _, s := range stacks[1:] { // the first is the caller's
		st := string(bytes.TrimSpace(s))
		if st == "" || isFramework(st) {
			continue
		}
		out = append(out, st)
	}
	return out
}

func isFramework(stack string) bool {
	for _, f := range framework {
		if strings.Contains(stack, f) {
			return true
		}
	}
	return false
}
