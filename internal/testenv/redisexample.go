package testenv

import (
	"errors"
	"fmt"
	"os"
)

// SharedRedis returns the Redis server shared by the tests of this test
// binary (the one [Redis] returns), for code that has no testing.TB: Example
// functions, whose server TestMain provides. It starts the server on first
// use; [Shutdown] stops it. Pass its error to [ExamplesUnavailable].
func SharedRedis() (*RedisServer, error) {
	return shared("redis", startRedis)
}

// ExamplesUnavailable decides, from TestMain, what to do when a TB-less
// provisioner such as [SharedRedis] failed with err, since Example functions
// cannot skip themselves. It returns "" when err is nil. When the server is
// merely unavailable on this machine and not under [CI], it prints why to
// stderr and returns a -test.skip pattern matching the examples, for
// flag.Set("test.skip", pattern) before m.Run. Under CI, or for a server
// that was found but failed to start, it prints the error and exits with
// status 1, as the provisioners taking a testing.TB fail the test.
func ExamplesUnavailable(err error) (skipPattern string) {
	if err == nil {
		return ""
	}
	var ue *unavailableError
	if errors.As(err, &ue) && !CI() {
		fmt.Fprintf(os.Stderr, "testenv: skipping the examples: %s unavailable: %v\n\tinstall it with: %s\n", ue.what, ue.err, ue.install)
		return "^Example"
	}
	fmt.Fprintf(os.Stderr, "testenv: the examples need a server: %v\n", err)
	os.Exit(1)
	return ""
}
