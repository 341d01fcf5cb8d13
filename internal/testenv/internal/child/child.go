// Package child runs the command of a wrapper program (withstores,
// testreport): the command gets the interrupts, and the wrapper lives on to
// do its work after the command has ended.
package child

import (
	"errors"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
)

// Start starts cmd and passes SIGINT and SIGTERM on to it until wait
// returns. wait waits for cmd and returns its exit status: 0, the
// command's own (at least 1 when it failed), or 1 with err when it could
// not be waited for. Call wait exactly once, after reading the pipes of cmd
// to their end.
func Start(cmd *exec.Cmd) (wait func() (code int, err error), err error) {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	if err := cmd.Start(); err != nil {
		signal.Stop(sigs)
		return nil, err
	}
	done, forwarded := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(forwarded)
		for {
			select {
			case s := <-sigs:
				_ = cmd.Process.Signal(s)
			case <-done:
				return
			}
		}
	}()
	return func() (int, error) {
		err := cmd.Wait()
		signal.Stop(sigs)
		close(done)
		<-forwarded
		var exit *exec.ExitError
		switch {
		case err == nil:
			return 0, nil
		case errors.As(err, &exit):
			return max(exit.ExitCode(), 1), nil
		default:
			return 1, err
		}
	}, nil
}
