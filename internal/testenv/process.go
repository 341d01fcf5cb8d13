package testenv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/golocker/locker/internal/freeport"
	"github.com/testcontainers/testcontainers-go"
)

// process is a server process started by this package. It is stopped by its
// own PID (SIGTERM, then SIGKILL after stopTimeout), never by name. Its
// stdout and stderr are appended to a log file whose tail goes into startup
// error messages.
type process struct {
	name string // for messages: "redis-server"
	path string
	args []string
	dir  string // working directory
	log  string // log file
	// user, when set, is the account the process runs as (servers that
	// refuse to run as root: PostgreSQL, PgBouncer).
	user string
	// stopSig is the signal that stops the server at once; 0 means
	// SIGTERM (PostgreSQL's SIGTERM waits for its clients: it takes SIGINT).
	stopSig syscall.Signal

	mu      sync.Mutex
	cmd     *exec.Cmd
	exited  chan struct{} // closed when the running process has exited
	waitErr error
}

// newProcess returns a process, not yet started, that runs path with args in
// dir and logs to dir/<name>.log.
func newProcess(name, path, dir string, args ...string) *process {
	return &process{
		name: name,
		path: path,
		args: args,
		dir:  dir,
		log:  filepath.Join(dir, name+".log"),
	}
}

// start starts the process. It must not be running.
func (p *process) start() error {
	f, err := os.OpenFile(p.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("open %s log: %w", p.name, err)
	}
	defer f.Close() // the child has its own copy

	cmd := exec.Command(p.path, p.args...)
	cmd.Dir = p.dir
	cmd.Stdout = f
	cmd.Stderr = f
	cmd.SysProcAttr = sysProcAttr()
	if p.user != "" {
		if err := runAs(cmd.SysProcAttr, p.user); err != nil {
			return fmt.Errorf("start %s: %w", p.name, err)
		}
	}

	// PR_SET_PDEATHSIG fires when the thread that forked the child exits, not
	// the process. Go only ends a thread when a goroutine exits while locked
	// to it; locking here keeps this goroutine (and so the fork) on one
	// thread, and unlocking returns that thread to the pool, alive.
	runtime.LockOSThread()
	err = cmd.Start()
	runtime.UnlockOSThread()
	if err != nil {
		return fmt.Errorf("start %s: %w", p.name, err)
	}

	exited := make(chan struct{})
	p.mu.Lock()
	p.cmd, p.exited, p.waitErr = cmd, exited, nil
	p.mu.Unlock()
	go func() { // owned by p: ends when the child exits, which stop ensures
		err := cmd.Wait()
		p.mu.Lock()
		p.waitErr = err
		p.mu.Unlock()
		close(exited)
	}()
	return nil
}

// done returns a channel closed when the current process has exited.
func (p *process) done() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.exited
}

// exitErr describes how the process ended; call it after done is closed.
func (p *process) exitErr() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.waitErr == nil {
		return fmt.Errorf("%s exited with status 0", p.name)
	}
	return fmt.Errorf("%s exited: %w", p.name, p.waitErr)
}

// stop sends SIGTERM to the process, waits up to stopTimeout, then sends
// SIGKILL, and returns after the process has exited. It is a no-op when the
// process is not running.
func (p *process) stop() {
	p.mu.Lock()
	cmd, exited := p.cmd, p.exited
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	select {
	case <-exited:
		return
	default:
	}
	sig := p.stopSig
	if sig == 0 {
		sig = syscall.SIGTERM
	}
	_ = cmd.Process.Signal(sig)
	timer := time.NewTimer(stopTimeout)
	defer timer.Stop()
	select {
	case <-exited:
	case <-timer.C:
		_ = cmd.Process.Kill()
		<-exited
	}
}

// logTail returns the last lines of the process log, indented for a test
// message.
func (p *process) logTail() string {
	return fileTail(p.log, 25)
}

// fileTail returns the last n lines of the file at path (read from its last
// 8 KiB), indented, or a note saying why it cannot.
func fileTail(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return "\t(no log: " + err.Error() + ")"
	}
	defer f.Close()
	const maxRead = 8 << 10
	if fi, err := f.Stat(); err == nil && fi.Size() > maxRead {
		_, _ = f.Seek(fi.Size()-maxRead, io.SeekStart)
	}
	b, _ := io.ReadAll(f)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return "\t" + strings.Join(lines, "\n\t")
}

// errExited marks a startup failure in which the process exited, which is
// worth a retry on other ports (the usual cause is a port taken between
// FreePort and bind).
var errExited = errors.New("process exited during startup")

// waitReady polls probe until it succeeds, the process exits or ctx ends.
// Errors carry the tail of the process log.
func waitReady(ctx context.Context, p *process, probe func(context.Context) error) error {
	exited := p.done()
	var last error
	for {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		last = probe(pctx)
		cancel()
		if last == nil {
			return nil
		}
		select {
		case <-exited:
			return fmt.Errorf("%w: %w (last probe: %v); %s log %s:\n%s",
				errExited, p.exitErr(), last, p.name, p.log, p.logTail())
		case <-ctx.Done():
			return fmt.Errorf("%s not ready: %w (last probe: %v); log %s:\n%s",
				p.name, ctx.Err(), last, p.log, p.logTail())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// startReady starts p and waits until probe succeeds; on failure it stops p.
func startReady(ctx context.Context, p *process, probe func(context.Context) error) error {
	if err := p.start(); err != nil {
		return err
	}
	if err := waitReady(ctx, p, probe); err != nil {
		p.stop()
		return err
	}
	return nil
}

// retryPorts calls try with nports fresh free ports, up to three times while
// try fails with errExited.
func retryPorts(nports int, try func(ports []int) error) error {
	var err error
	for range 3 {
		var ports []int
		ports, err = freeport.Ports(nports)
		if err != nil {
			return err
		}
		if err = try(ports); err == nil || !errors.Is(err, errExited) {
			return err
		}
	}
	return err
}

// runTool runs a one-shot command (mariadb-install-db, redis-cli) with a
// bounded time and returns its combined output in the error when it fails.
func runTool(ctx context.Context, dir, path string, args ...string) error {
	return runToolAs(ctx, "", dir, path, args...)
}

// runToolAs is runTool as user ("" means this process's user).
func runToolAs(ctx context.Context, user, dir, path string, args ...string) error {
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Dir = dir
	cmd.SysProcAttr = sysProcAttr()
	if user != "" {
		if err := runAs(cmd.SysProcAttr, user); err != nil {
			return fmt.Errorf("%s: %w", filepath.Base(path), err)
		}
	}
	cmd.WaitDelay = time.Second
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s %s: %w; output:\n%s", filepath.Base(path), strings.Join(args, " "), err, indent(out.String()))
	}
	return nil
}

// indent indents every line of s by a tab.
func indent(s string) string {
	s = strings.TrimRight(s, "\n")
	if len(s) > 4000 {
		s = "..." + s[len(s)-4000:]
	}
	return "\t" + strings.ReplaceAll(s, "\n", "\n\t")
}

const (
	// tempDirPrefix starts the names of the servers' temporary directories.
	tempDirPrefix = "locker-testenv-"
	// ownerFile, in a temporary directory, holds the PID of the test binary
	// that made it.
	ownerFile = "owner.pid"
)

// sweepOnce removes stale temporary directories once per test binary.
var sweepOnce sync.Once

// tempDir creates a temporary directory for a server of the given kind,
// recording the test binary's PID in it.
func tempDir(kind string) (string, error) {
	sweepOnce.Do(removeStaleDirs)
	dir, err := os.MkdirTemp("", tempDirPrefix+kind+"-")
	if err != nil {
		return "", fmt.Errorf("create temp dir for %s: %w", kind, err)
	}
	if err := os.WriteFile(filepath.Join(dir, ownerFile), []byte(strconv.Itoa(os.Getpid())+"\n"), 0o644); err != nil {
		_ = os.RemoveAll(dir)
		return "", fmt.Errorf("create temp dir for %s: %w", kind, err)
	}
	return dir, nil
}

// pollReady polls probe until it succeeds or timeout (or ctx) ends; it is
// waitReady for servers that are not our processes (containers).
func pollReady(ctx context.Context, timeout time.Duration, probe func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last error
	for {
		pctx, pcancel := context.WithTimeout(ctx, time.Second)
		last = probe(pctx)
		pcancel()
		if last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("not ready: %w (last probe: %v)", ctx.Err(), last)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// dialCheck checks that a TCP connection can be opened to every address, for
// endpoints named by environment variables.
func dialCheck(addrs ...string) error {
	var errs []error
	for _, addr := range addrs {
		conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		_ = conn.Close()
	}
	return errors.Join(errs...)
}

// procSet is the processes of one server started by this package, or the
// container it runs in; neither for a server from the environment. It
// serialises restarts and the final stop.
type procSet struct {
	mu    sync.Mutex
	procs []*process
	ctr   testcontainers.Container
}

func newProcSet(procs ...*process) procSet { return procSet{procs: procs} }

// containerSet is the procSet of a server that runs in c: stop removes c.
func containerSet(c testcontainers.Container) procSet { return procSet{ctr: c} }

// stop stops every process, in parallel, or removes the container.
func (ps *procSet) stop() {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if ps.ctr != nil {
		terminateContainer(ps.ctr)
	}
	stopAll(ps.procs)
}

// stopAll stops procs in parallel.
func stopAll(procs []*process) {
	var wg sync.WaitGroup
	for _, p := range procs {
		wg.Go(p.stop)
	}
	wg.Wait()
}

// restart stops every process and starts each again, until probes[i]
// answers for process i, then waits for settle[i] (when given) as well; a
// container is stopped and started again, until every probe answers. server
// names the server in messages. A server with neither (one named by an
// environment variable) cannot be restarted: t fails under [CI] and skips
// elsewhere. t fails when the server does not come back.
func (ps *procSet) restart(t testing.TB, server string, probes, settle []func(context.Context) error) {
	t.Helper()
	if len(ps.procs) == 0 && ps.ctr == nil {
		msg := fmt.Sprintf("testenv: cannot restart %s, which this package did not start (a test that restarts its server gets one of its own from New*)", server)
		if CI() {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if ps.ctr != nil {
		if err := restartContainer(ps.ctr, containerTimeout, append(probes, settle...)); err != nil {
			t.Fatalf("testenv: restart %s: %v", server, err)
		}
		return
	}
	stopAll(ps.procs)
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	for i, p := range ps.procs {
		if err := startReady(ctx, p, probes[i]); err != nil {
			t.Fatalf("testenv: restart %s: %v", server, err)
		}
	}
	for i, ready := range settle {
		if err := waitReady(ctx, ps.procs[i], ready); err != nil {
			t.Fatalf("testenv: restart %s: %v", server, err)
		}
	}
}

// cpu returns the CPU time the processes have used so far (restarts count
// from their start), for a server this package started from binaries.
func (ps *procSet) cpu() (time.Duration, error) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if len(ps.procs) == 0 {
		return 0, errors.New("the CPU time of a server is known only when it was started from binaries")
	}
	var sum time.Duration
	for _, p := range ps.procs {
		p.mu.Lock()
		cmd := p.cmd
		p.mu.Unlock()
		if cmd == nil || cmd.Process == nil {
			return 0, fmt.Errorf("%s is not running", p.name)
		}
		d, err := processCPU(cmd.Process.Pid)
		if err != nil {
			return 0, fmt.Errorf("%s: %w", p.name, err)
		}
		sum += d
	}
	return sum, nil
}
