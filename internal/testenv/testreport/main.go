// Command testreport runs go test -json (or reads its output from stdin),
// prints what go test prints without -json and -v (the output of a failed
// test keeps -v's lines that name the test running, as parallel tests
// interleave), then counts the conformance cases of every harness: run,
// passed, failed and skipped.
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
//
// With -cases it prints the names of the conformance cases, one a line,
// and exits: .ci/docker-suite builds its go test -skip pattern from them.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"

	"github.com/golocker/locker/conformance"
	"github.com/golocker/locker/internal/storeenv"
	"github.com/golocker/locker/internal/testenv/internal/child"
)

func main() {
	flag.Usage = func() {
		fmt.Fprintln(flag.CommandLine.Output(), "usage: testreport [-- go test -json args...]  (or: go test -json ... | testreport; testreport -cases)")
		flag.PrintDefaults()
	}
	listCases := flag.Bool("cases", false, "print the names of the conformance cases, one a line, and exit")
	flag.Parse()
	if *listCases {
		for _, name := range conformance.Cases() {
			fmt.Println(name)
		}
		return
	}
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
	wait, err := child.Start(cmd)
	if err != nil {
		fmt.Fprintf(stderr, "testreport: %v\n", err)
		return 1
	}
	readErr := r.read(out)
	if readErr != nil {
		// Keep the pipe drained so that the command can end.
		_, _ = io.Copy(io.Discard, out)
	}
	code, err := wait()
	if err != nil {
		fmt.Fprintf(stderr, "testreport: %v\n", err)
	}
	if readErr != nil {
		fmt.Fprintf(stderr, "testreport: read the output of %s: %v\n", args[0], readErr)
		code = max(code, 1)
	}
	if r.failed {
		code = max(code, 1)
	}
	return r.finish(code, storeenv.CI())
}
