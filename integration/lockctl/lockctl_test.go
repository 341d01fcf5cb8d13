//go:build unix

// Package lockctl_test runs the lockctl command (cmd/lockctl),
// built once, as a subprocess against real servers of every backend that
// works across processes: a --try run races another, a command outlives
// its lock, signals reach the command, and the exit codes are the
// documented ones.
package lockctl_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/golocker/locker/integration/internal/secreturl"
	"github.com/golocker/locker/integration/internal/storeurl"
	"github.com/golocker/locker/internal/testenv"
)

// lockctl is the path of the binary TestMain built.
var lockctl string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "lockctl-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	lockctl = filepath.Join(dir, "lockctl")
	build := exec.Command("go", "build", "-o", lockctl, ".")
	build.Dir = filepath.Join("..", "..", "cmd", "lockctl")
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build lockctl: %v\n%s", err, out)
		_ = os.RemoveAll(dir)
		os.Exit(1)
	}
	testenv.MainWith(m, func() {
		storeurl.Stop()
		_ = os.RemoveAll(dir)
	})
}

// ttl is the TTL of every lockctl run of these tests: a lost lock is
// noticed within a third of it.
const ttl = 3 * time.Second

// bound is the most any step is waited for: generous, never asserted.
const bound = time.Minute

// proc is a lockctl process started by start.
type proc struct {
	cmd            *exec.Cmd
	stdout, stderr bytes.Buffer
	done           chan struct{}
	code           int
}

// start starts lockctl with args in dir, with LOCKER_URL set to url.
func start(t *testing.T, dir, url string, args ...string) *proc {
	t.Helper()
	p := &proc{cmd: exec.Command(lockctl, args...), done: make(chan struct{})}
	p.cmd.Dir = dir
	p.cmd.Env = append(os.Environ(), "LOCKER_URL="+url)
	p.cmd.Stdout, p.cmd.Stderr = &p.stdout, &p.stderr
	// The command lockctl runs shares its stdout and stderr: a command
	// that outlives a killed lockctl would keep Wait, and so the cleanup,
	// waiting for the pipes to close.
	p.cmd.WaitDelay = 10 * time.Second
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start lockctl: %v", err)
	}
	go func() {
		defer close(p.done)
		err := p.cmd.Wait()
		var ee *exec.ExitError
		switch {
		case err == nil:
		case errors.As(err, &ee):
			p.code = ee.ExitCode()
		default:
			p.code = -1
		}
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			// lockctl runs its command in a process group of its own,
			// which a SIGKILL to lockctl leaves running.
			for _, child := range testenv.ChildrenOf(p.cmd.Process.Pid) {
				_ = syscall.Kill(-child, syscall.SIGKILL)
			}
			_ = p.cmd.Process.Kill()
			select {
			case <-p.done:
			case <-time.After(bound):
				t.Errorf("lockctl %s did not end within %v of its SIGKILL", strings.Join(p.cmd.Args[1:], " "), bound)
			}
		}
	})
	return p
}

// wait waits for p to exit and returns its exit code.
func (p *proc) wait(t *testing.T) int {
	t.Helper()
	select {
	case <-p.done:
		return p.code
	case <-time.After(bound):
		t.Fatalf("lockctl %s still running after %v; stderr: %s", strings.Join(p.cmd.Args[1:], " "), bound, p.stderr.String())
		return 0
	}
}

// exited reports whether p has exited.
func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// run runs lockctl to its end and returns its exit code and output.
func run(t *testing.T, dir, url string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	p := start(t, dir, url, args...)
	code = p.wait(t)
	return code, p.stdout.String(), p.stderr.String()
}

// waitFile waits until dir/name exists and returns its content; it fails
// the test if p exits first.
func waitFile(t *testing.T, p *proc, dir, name string) string {
	t.Helper()
	deadline := time.Now().Add(bound)
	for {
		if b, err := os.ReadFile(filepath.Join(dir, name)); err == nil && len(b) > 0 {
			return strings.TrimSpace(string(b))
		}
		if p != nil && p.exited() {
			t.Fatalf("lockctl exited (%d) before %s appeared; stderr: %s", p.code, name, p.stderr.String())
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not appear within %v", name, bound)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// fileExists reports whether dir/name exists.
func fileExists(dir, name string) bool {
	_, err := os.Stat(filepath.Join(dir, name))
	return err == nil
}

// key returns a key of the test's own.
func key(t *testing.T) string {
	return strings.NewReplacer("/", "-", " ", "-").Replace(t.Name()) + "-" + strconv.FormatInt(time.Now().UnixNano(), 36)
}

// waitGo is a shell command that records its start, then waits for the
// file "go" (the test's signal to end).
const waitGo = `echo "$LOCKER_TOKEN" >> ran; while [ ! -e go ]; do sleep 0.05; done`

func TestLockctl(t *testing.T) {
	for _, s := range storeurl.Backends {
		t.Run(s.Name, func(t *testing.T) {
			url := s.URL(t)
			t.Run("TryRunsOnce", func(t *testing.T) { testTryRunsOnce(t, url) })
			t.Run("QuietTry", func(t *testing.T) { testQuietTry(t, url) })
			t.Run("LostLock", func(t *testing.T) { testLostLock(t, url) })
			t.Run("Interrupt", func(t *testing.T) { testInterrupt(t, url) })
			t.Run("ExitCodes", func(t *testing.T) { testExitCodes(t, url) })
			t.Run("MinHold", func(t *testing.T) { testMinHold(t, url) })
			t.Run("LostLockKill", func(t *testing.T) { testLostLockKill(t, url) })
		})
	}
}

// testTryRunsOnce: of two "run --try" at once, one runs the command and the
// other exits 75 without running it.
func testTryRunsOnce(t *testing.T, url string) {
	dir, k := t.TempDir(), key(t)
	ttlArg := "--ttl=" + ttl.String()
	a := start(t, dir, url, "run", "--try", ttlArg, k, "--", "sh", "-c", waitGo)
	b := start(t, dir, url, "run", k, "--try", ttlArg, "--", "sh", "-c", waitGo) // flags after KEY too
	// The one that got the key waits for "go": the other must give up.
	var first, second *proc
	select {
	case <-a.done:
		first, second = a, b
	case <-b.done:
		first, second = b, a
	case <-time.After(bound):
		t.Fatalf("neither run --try ended within %v; stderr: %s / %s", bound, a.stderr.String(), b.stderr.String())
	}
	if first.code != 75 {
		t.Errorf("a run --try that finds the key held must exit 75 without running its command: exit %d, stderr %q", first.code, first.stderr.String())
	}
	waitFile(t, second, dir, "ran")
	if err := os.WriteFile(filepath.Join(dir, "go"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if code := second.wait(t); code != 0 {
		t.Errorf("the run --try that got the key: exit %d, want its command's 0; stderr %q", code, second.stderr.String())
	}
	b2, _ := os.ReadFile(filepath.Join(dir, "ran"))
	if n := len(strings.Fields(string(b2))); n != 1 {
		t.Errorf("two run --try at once must run the command once: it ran %d times", n)
	}
}

// testQuietTry: a run --try --quiet that finds the key held prints nothing
// (cron mails whatever a job prints) and still exits 75.
func testQuietTry(t *testing.T, url string) {
	dir, k := t.TempDir(), key(t)
	holder := start(t, dir, url, "run", "--ttl", ttl.String(), k, "--", "sh", "-c", waitGo)
	waitFile(t, holder, dir, "ran")
	code, out, errOut := run(t, dir, url, "run", "--try", "--quiet", k, "--", "sh", "-c", "echo ran >> ran")
	if code != 75 || out != "" || errOut != "" {
		t.Errorf("run --try --quiet on a held key must exit 75 and print nothing: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	if err := os.WriteFile(filepath.Join(dir, "go"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if code := holder.wait(t); code != 0 {
		t.Errorf("the holder: exit %d; stderr %q", code, holder.stderr.String())
	}
	b, _ := os.ReadFile(filepath.Join(dir, "ran"))
	if n := len(strings.Fields(string(b))); n != 1 {
		t.Errorf("run --try --quiet on a held key must not run its command: ran %d times", n)
	}
}

// testLostLock: LOCKER_TOKEN is the token Inspect reports; when the key is
// freed behind the command (unlock --force), the command gets SIGTERM and
// lockctl exits 70 saying so.
func testLostLock(t *testing.T, url string) {
	dir, k := t.TempDir(), key(t)
	script := `echo "$LOCKER_TOKEN" > token; echo "$LOCKER_KEY $LOCKER_OWNER" > who
trap 'echo TERM > got; exit 0' TERM
while :; do sleep 0.05; done`
	p := start(t, dir, url, "run", "--ttl", ttl.String(), "--owner", "lost-test", k, "--", "sh", "-c", script)
	token := waitFile(t, p, dir, "token")
	if who := waitFile(t, p, dir, "who"); who != k+" lost-test" {
		t.Errorf("LOCKER_KEY and LOCKER_OWNER: got %q, want %q", who, k+" lost-test")
	}

	code, out, errOut := run(t, dir, url, "inspect", "--json", k)
	if code != 0 {
		t.Fatalf("inspect: exit %d: %s", code, errOut)
	}
	var st struct {
		Held  bool   `json:"held"`
		Owner string `json:"owner"`
		Token uint64 `json:"token"`
	}
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("inspect --json: %v in %q", err, out)
	}
	if !st.Held || strconv.FormatUint(st.Token, 10) != token || st.Owner != "lost-test" {
		t.Errorf("inspect = %+v; want held by lost-test with the command's LOCKER_TOKEN %s", st, token)
	}

	if code, _, errOut := run(t, dir, url, "unlock", k); code != 2 {
		t.Errorf("unlock without --force must be refused with exit 2: exit %d, %q", code, errOut)
	}
	if code, out, errOut := run(t, dir, url, "unlock", "--force", k); code != 0 {
		t.Fatalf("unlock --force: exit %d: %s%s", code, out, errOut)
	}
	if got := waitFile(t, p, dir, "got"); got != "TERM" {
		t.Errorf("the command of a lost lock must get SIGTERM: got %q", got)
	}
	if code := p.wait(t); code != 70 {
		t.Errorf("lockctl run whose lock was lost must exit 70: exit %d", code)
	}
	if !strings.Contains(p.stderr.String(), "lost the lock") {
		t.Errorf("lockctl run must say on stderr that the lock was lost: %q", p.stderr.String())
	}
	if code, _, errOut := run(t, dir, url, "unlock", "--force", k); code != 1 || !strings.Contains(errOut, "nobody holds") {
		t.Errorf("unlock --force of a free key: exit %d, %q; want 1, nobody holds", code, errOut)
	}
}

// testLostLockKill: a command that ignores SIGTERM after its lock was lost
// gets SIGKILL after --grace, and lockctl exits 70.
func testLostLockKill(t *testing.T, url string) {
	dir, k := t.TempDir(), key(t)
	script := `trap '' TERM; echo up > started; while :; do sleep 0.05; done`
	p := start(t, dir, url, "run", "--ttl", ttl.String(), "--grace", "1s", k, "--", "sh", "-c", script)
	waitFile(t, p, dir, "started")
	if code, out, errOut := run(t, dir, url, "unlock", "--force", k); code != 0 {
		t.Fatalf("unlock --force: exit %d: %s%s", code, out, errOut)
	}
	if code := p.wait(t); code != 70 {
		t.Errorf("lockctl run whose lock was lost must exit 70: exit %d; stderr %q", code, p.stderr.String())
	}
	if !strings.Contains(p.stderr.String(), "sending SIGKILL") {
		t.Errorf("a command that ignores SIGTERM must get SIGKILL after --grace: stderr %q", p.stderr.String())
	}
}

// testInterrupt: SIGINT to lockctl reaches the command, and the key is
// released after it.
func testInterrupt(t *testing.T, url string) {
	dir, k := t.TempDir(), key(t)
	script := `trap 'echo INT > got; exit 130' INT; echo up > started; while :; do sleep 0.05; done`
	p := start(t, dir, url, "run", "--ttl", ttl.String(), k, "--", "sh", "-c", script)
	waitFile(t, p, dir, "started")
	if err := p.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if got := waitFile(t, p, dir, "got"); got != "INT" {
		t.Errorf("SIGINT to lockctl must reach the command: got %q", got)
	}
	if code := p.wait(t); code != 130 {
		t.Errorf("lockctl must exit with the command's status 130: exit %d; stderr %q", code, p.stderr.String())
	}
	if code, _, errOut := run(t, dir, url, "run", "--try", k, "--", "true"); code != 0 {
		t.Errorf("after the interrupted run the key must be free: run --try exit %d, %q", code, errOut)
	}
}

// testMinHold: a key taken with --min-hold stays taken after a command
// that ended at once (the next run --try exits 75) until unlock --force
// frees it.
func testMinHold(t *testing.T, url string) {
	dir, k := t.TempDir(), key(t)
	first := start(t, dir, url, "run", "--try", "--ttl", "30s", "--min-hold", "20s", k, "--", "sh", "-c", "echo done > ran")
	for !first.exited() && !fileExists(dir, "ran") {
		time.Sleep(20 * time.Millisecond)
	}
	if !fileExists(dir, "ran") {
		t.Fatalf("run --try --min-hold did not run its command: exit %d, %q", first.wait(t), first.stderr.String())
	}
	if code, _, errOut := run(t, dir, url, "run", "--try", k, "--", "true"); code != 75 {
		t.Errorf("a key taken with --min-hold must stay taken after its command ended: run --try exit %d, %q", code, errOut)
	}
	if code, out, errOut := run(t, dir, url, "unlock", "--force", k); code != 0 {
		t.Fatalf("unlock --force of a key kept for its MinHold: exit %d: %s%s", code, out, errOut)
	}
	if code := first.wait(t); code != 0 {
		t.Errorf("the run whose command ended before the key was freed: exit %d, want its command's 0; stderr %q", code, first.stderr.String())
	}
	if code, _, errOut := run(t, dir, url, "run", "--try", k, "--", "true"); code != 0 {
		t.Errorf("after unlock --force the key must be free: run --try exit %d, %q", code, errOut)
	}
}

// testExitCodes: the command's status, signal deaths as 128+N, a command
// that cannot run, usage errors.
func testExitCodes(t *testing.T, url string) {
	dir, k := t.TempDir(), key(t)
	for _, c := range []struct {
		args []string
		want int
	}{
		{[]string{"run", k, "--", "sh", "-c", "exit 7"}, 7},
		{[]string{"run", k, "--", "sh", "-c", "kill -KILL $$"}, 128 + int(syscall.SIGKILL)},
		{[]string{"run", k, "--", filepath.Join(dir, "no-such-command")}, 127},
		{[]string{"run", k, "--", dir}, 126},
		{[]string{"run", k, "true"}, 2},      // no "--"
		{[]string{"run", "--", "true"}, 2},   // no KEY
		{[]string{"inspect", k, k + "x"}, 2}, // two keys
		{[]string{"frob", k}, 2},
		{[]string{"run", "--help"}, 0},
		{[]string{"unlock", "--help"}, 0},
	} {
		if code, _, errOut := run(t, dir, url, c.args...); code != c.want {
			t.Errorf("lockctl %s: exit %d, want %d; stderr %q", strings.Join(c.args, " "), code, c.want, errOut)
		}
	}
}

// TestSecretsNotPrinted: the password of an unreachable store's URL, or of
// a malformed URL, is in no output.
func TestSecretsNotPrinted(t *testing.T) {
	const secret = "s3cr3t-pw"
	dir := t.TempDir()
	for _, c := range []struct {
		what, url string
		code      int // 1: the store fails; 2: the URL is the user's mistake
	}{
		{"an unreachable Redis", "redis://:" + secret + "@127.0.0.1:1/0", 1},
		{"an unreachable MySQL", "mysql://root:" + secret + "@127.0.0.1:1/db", 1},
		{"a malformed URL", "redis://:" + secret + "%zz@127.0.0.1:1/0", 2},
	} {
		for _, args := range [][]string{{"inspect", "k"}, {"run", "--try", "k", "--", "true"}, {"unlock", "--force", "k"}} {
			code, out, errOut := run(t, dir, c.url, args...)
			if code != c.code {
				t.Errorf("lockctl %s on %s: exit %d, want %d; %q", strings.Join(args, " "), c.what, code, c.code, errOut)
			}
			if strings.Contains(out+errOut, secret) {
				t.Errorf("lockctl %s printed the URL's password: %q", strings.Join(args, " "), out+errOut)
			}
		}
	}
}

// oneDash matches a flag named with one dash, as the flag package does.
var oneDash = regexp.MustCompile(`(^|[ :])-[a-z]`)

// TestUsageErrors: every usage mistake exits 2 with a message that names
// lockctl's flag, never the library's Go option, whether lockctl, the URL's
// parser or the backend finds it.
func TestUsageErrors(t *testing.T) {
	stores := map[string]string{}
	for _, s := range storeurl.Backends {
		if s.Name == "redis" || s.Name == "etcd" || s.Name == "zookeeper" {
			stores[s.Name] = s.URL(t)
		}
	}
	dir := t.TempDir()
	for _, c := range []struct {
		store string // "" for an unreachable Redis: nothing is dialled
		args  []string
		want  []string // in stderr
	}{
		{"", []string{"run", "--ttl", "-1s", "k", "--", "true"}, []string{"--ttl"}},
		{"", []string{"run", "--grace", "-1s", "k", "--", "true"}, []string{"--grace"}},
		{"", []string{"run", "--ttl", "soon", "k", "--", "true"}, []string{"--ttl"}},
		{"", []string{"run", "--frob", "k", "--", "true"}, []string{"--frob"}},
		{"", []string{"run", "--ttl", "1ms", "k", "--", "true"}, []string{"--ttl"}},
		{"", []string{"run", "--quiet", "k", "--", "true"}, []string{"--quiet", "--try"}},
		{"", []string{"run", "--permits", "2", "k", "--", "true"}, []string{"--permits", "--limit"}},
		{"", []string{"run", "--limit", "2", "--permits", "3", "k", "--", "true"}, []string{"--permits", "--limit"}},
		{"", []string{"run", "--limit", "-1", "k", "--", "true"}, []string{"--limit"}},
		{"", []string{"inspect", "--url", "frob://127.0.0.1:1", "k"}, []string{"frob"}},
		{"", []string{"inspect", "--url", "redis://127.0.0.1:1/0?ttl=soon", "k"}, []string{"ttl"}},
		{"redis", []string{"run", "--min-hold", "5s", "--max-hold", "1s", "k", "--", "true"}, []string{"--max-hold", "--min-hold"}},
		{"redis", []string{"inspect", ""}, []string{"key"}},
		{"etcd", []string{"run", "--ttl", "1500ms", "k", "--", "true"}, []string{"--ttl"}},
		// etcd lengthens one lock's TTL for a MinHold; ZooKeeper cannot.
		{"zookeeper", []string{"run", "--try", "--min-hold", "1h", "k", "--", "true"}, []string{"--min-hold", "--ttl"}},
	} {
		url := "redis://127.0.0.1:1/0"
		if c.store != "" {
			url = stores[c.store]
		}
		code, _, errOut := run(t, dir, url, c.args...)
		if code != 2 {
			t.Errorf("lockctl %s (%s): exit %d, want 2 for a usage mistake; stderr %q", strings.Join(c.args, " "), url, code, errOut)
		}
		for _, w := range c.want {
			if !strings.Contains(errOut, w) {
				t.Errorf("lockctl %s: stderr %q must name %s", strings.Join(c.args, " "), errOut, w)
			}
		}
		for _, option := range []string{"WithTTL", "MinHold", "MaxHold", "WithOwnerLabel"} {
			if strings.Contains(errOut, option) {
				t.Errorf("lockctl %s: stderr %q names the Go option %s instead of lockctl's flag", strings.Join(c.args, " "), errOut, option)
			}
		}
		if oneDash.MatchString(errOut) {
			t.Errorf("lockctl %s: stderr %q names a flag with one dash; the usage says --flag", strings.Join(c.args, " "), errOut)
		}
	}
}

// secretURLs are the templates of secreturl.URLs that TestNoPasswordPrinted
// runs lockctl on: one for each way its message about a failed open comes
// out (a usage mistake, exit 2: an unknown scheme, no scheme, a URL that
// does not parse, one the backend refuses, a bad parameter value; a store
// it cannot reach, exit 1) and for each place a password sits (userinfo, a
// host list, a secret parameter). integration/backends runs every template
// through locker.Open, which makes every message lockctl prints here.
var secretURLs = []string{
	"u:{pw}@127.0.0.1:{port}",
	"{s}//u:{pw}@127.0.0.1:{port}",
	"{s}:u:{pw}@127.0.0.1:{port}",
	"{s}://u:{pw}%zz@127.0.0.1:{port}",
	"{s}://u:{pw}@127.0.0.1:{port}",
	"{s}://127.0.0.1:{port},u:{pw}@127.0.0.1:{port}",
	"{s}://u:{pw}@127.0.0.1:{port}/0?ttl=forever",
	"{s}://127.0.0.1:{port}?password={pw}",
}

// secretPasswords are the passwords of secreturl.Passwords that
// TestNoPasswordPrinted tries: "a" is in every message lockctl prints,
// "dial" in those of a store it cannot reach, so hiding more than the
// URL's parts changes them.
var secretPasswords = []string{"a", "dial"}

// TestNoPasswordPrinted: lockctl prints no URL's password, however
// malformed the URL, and hiding it leaves the rest of its output as it is
// (see package secreturl), on the templates of secretURLs. The schemes are
// those whose open fails at once on a closed port.
func TestNoPasswordPrinted(t *testing.T) {
	port, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, scheme := range []string{"redis", "mysql"} {
		t.Run(scheme, func(t *testing.T) {
			t.Parallel() // Redis's runs wait out its client's dial retries; MySQL's do not
			secreturl.CheckSome(t, scheme, port, 32, secretURLs, secretPasswords, func(raw string) (string, bool) {
				ctx, cancel := context.WithTimeout(t.Context(), bound)
				defer cancel()
				cmd := exec.CommandContext(ctx, lockctl, "inspect", "k")
				cmd.Dir = dir
				cmd.Env = append(os.Environ(), "LOCKER_URL="+raw)
				out, err := cmd.CombinedOutput()
				if err == nil {
					t.Errorf("lockctl inspect with %s must fail", raw)
				}
				return string(out), true
			})
		})
	}
}
