// Command testreport runs go test -json (or reads its output from stdin),
// prints what go test prints without -json, then counts the conformance
// cases of every harness: run, passed, failed and skipped.
//
//	go run ./internal/testenv/testreport -- go test -json -race ./integration/...
//	go test -json ./... | go run ./internal/testenv/testreport
//
// A conformance case is a subtest named like one of [conformance.Cases]
// inside a top test whose name starts with TestConformance; its harness is
// the package and the path of test names above it. A case may skip only for
// a documented property of its backend, listed with the reason in
// allowances (allowed.go). When the environment variable CI is true, any
// other skip fails the run, and so does a skipped harness; elsewhere they
// are listed at the end.
//
// The exit status is the command's (at least 1 when it fails, a build
// failure included), else 1 for a disallowed skip under CI, else 0. With no
// command, a failed test or package read from stdin counts as the command's
// failure. Interrupts go on to the command; testreport prints what it has
// once the command has ended.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"syscall"

	"github.com/golocker/locker/conformance"
	"github.com/golocker/locker/internal/storeenv"
)

func main() {
	flag.Usage = func() {
		fmt.Fprintln(flag.CommandLine.Output(), "usage: testreport [-- go test -json args...]  (or: go test -json ... | testreport)")
		flag.PrintDefaults()
	}
	flag.Parse()
	os.Exit(run(flag.Args(), os.Stdin, os.Stdout, os.Stderr))
}

// run runs the command args (or reads stdin when there is none) and
// returns the exit status.
func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	r := newReport(stdout, conformance.Cases(), allowances())
	if len(args) == 0 {
		if err := r.read(stdin); err != nil {
			fmt.Fprintf(stderr, "testreport: read: %v\n", err)
			return 1
		}
		code := 0
		if r.failed {
			code = 1
		}
		return r.finish(code, storeenv.CI())
	}

	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdin, cmd.Stderr = stdin, stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		fmt.Fprintf(stderr, "testreport: %v\n", err)
		return 1
	}
	// Interrupts reach the command (from the terminal, or forwarded here);
	// this process lives on to print the report.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(stderr, "testreport: %v\n", err)
		return 1
	}
	done := make(chan struct{})
	defer close(done)
	go func() {
		for {
			select {
			case s := <-sigs:
				_ = cmd.Process.Signal(s)
			case <-done:
				return
			}
		}
	}()
	readErr := r.read(out)
	if readErr != nil {
		// Keep the pipe drained so that the command can end.
		_, _ = io.Copy(io.Discard, out)
	}
	code := exitCode(cmd.Wait(), stderr)
	if readErr != nil {
		fmt.Fprintf(stderr, "testreport: read the output of %s: %v\n", args[0], readErr)
		code = max(code, 1)
	}
	return r.finish(code, storeenv.CI())
}

// exitCode turns the error of cmd.Wait into an exit status: the command's,
// at least 1 when it failed.
func exitCode(err error, stderr io.Writer) int {
	var exit *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &exit):
		return max(exit.ExitCode(), 1)
	default:
		fmt.Fprintf(stderr, "testreport: %v\n", err)
		return 1
	}
}
