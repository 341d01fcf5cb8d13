// Package child runs the test binary again as a child process, for what
// only a real process shows (a SIGKILL, a scheduler per process). A child
// reports events on stdout, one a line: "<what> <n> <unixnano>"; the
// parent reads them from a channel and may write lines to its stdin.
package child

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// modeVar names the environment variable that holds a child's mode.
const modeVar = "LOCKER_CHILD"

// Mode returns the mode this process was started in by Start; "" in the
// parent.
func Mode() string { return os.Getenv(modeVar) }

// Say reports one event on stdout: what, a number (a token, a tick) and
// the time.
func Say(what string, n uint64) { SayAt(what, n, time.Now()) }

// SayAt reports one event on stdout as Say does, at a time of the
// caller's (a deadline it passed).
func SayAt(what string, n uint64, at time.Time) {
	fmt.Printf("%s %d %d\n", what, n, at.UnixNano())
}

// Event is one line of a child.
type Event struct {
	Child int
	What  string
	N     uint64
	At    time.Time
}

// Proc is a running child.
type Proc struct {
	Cmd    *exec.Cmd
	stdin  io.WriteCloser
	mu     sync.Mutex
	stderr strings.Builder
	// exited is set once the child's stdout ended: it exited, or closed
	// it.
	exited atomic.Bool
	// stop closes when the test's cleanup begins: the reader stops
	// handing events to a channel nobody reads any more.
	stop chan struct{}
}

// Write implements io.Writer for the child's stderr.
func (p *Proc) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stderr.Write(b)
}

// Stderr returns what the child wrote to stderr so far.
func (p *Proc) Stderr() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stderr.String()
}

// Send writes line to the child's stdin.
func (p *Proc) Send(line string) error {
	_, err := io.WriteString(p.stdin, line+"\n")
	return err
}

// Start starts child i of the test binary in mode, with env added to the
// environment; its events go to events. The test's cleanup kills it and
// waits for it.
func Start(t *testing.T, i int, mode string, env []string, events chan<- Event) *Proc {
	t.Helper()
	p := &Proc{Cmd: exec.Command(os.Args[0], "-test.run=^$"), stop: make(chan struct{})}
	p.Cmd.Env = append(append(os.Environ(), modeVar+"="+mode), env...)
	p.Cmd.Stderr = p
	out, err := p.Cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if p.stdin, err = p.Cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	if err := p.Cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Go(func() { p.read(t, i, out, events) })
	t.Cleanup(func() {
		close(p.stop)
		_ = p.stdin.Close()
		_ = p.Cmd.Process.Kill()
		_ = p.Cmd.Wait()
		wg.Wait()
	})
	return p
}

// read hands the child's events to events until its stdout ends or the
// test's cleanup begins.
func (p *Proc) read(t *testing.T, i int, out io.Reader, events chan<- Event) {
	defer p.exited.Store(true)
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 3 {
			t.Errorf("child %d: unexpected line %q", i, sc.Text())
			continue
		}
		n, err1 := strconv.ParseUint(f[1], 10, 64)
		ns, err2 := strconv.ParseInt(f[2], 10, 64)
		if err := errors.Join(err1, err2); err != nil {
			t.Errorf("child %d: line %q: %v", i, sc.Text(), err)
			continue
		}
		select {
		case events <- Event{Child: i, What: f[0], N: n, At: time.Unix(0, ns)}:
		case <-p.stop:
			return
		}
	}
}

// Next returns the next event, failing the test (with the children's
// stderr) after wait.
func Next(t *testing.T, events <-chan Event, wait time.Duration, procs ...*Proc) Event {
	t.Helper()
	return Until(t, events, wait, func(Event) bool { return true }, procs...)
}

// Until returns the first event for which match returns true, passing
// every event before it to match as well; it fails the test (with the
// children's stderr, and which of them exited) when none came within
// wait in all, however many other events came meanwhile.
func Until(t *testing.T, events <-chan Event, wait time.Duration, match func(Event) bool, procs ...*Proc) Event {
	t.Helper()
	timeout := time.NewTimer(wait)
	defer timeout.Stop()
	for {
		select {
		case e := <-events:
			if match(e) {
				return e
			}
		case <-timeout.C:
			var errs []string
			for i, p := range procs {
				state := "running"
				if p.exited.Load() {
					state = "exited"
				}
				errs = append(errs, fmt.Sprintf("child %d (%s) stderr: %q", i, state, p.Stderr()))
			}
			t.Fatalf("no awaited event from the children within %v; %s", wait, strings.Join(errs, "; "))
			return Event{}
		}
	}
}
