//go:build unix

package lockctl_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/golocker/locker/integration/internal/storeurl"
)

// holdKey starts a "lockctl run" that holds k as owner until the file "go"
// appears in dir, and returns its token.
func holdKey(t *testing.T, dir, url, k, owner string) string {
	t.Helper()
	sub := filepath.Join(dir, owner)
	if err := os.MkdirAll(sub, 0o700); err != nil {
		t.Fatal(err)
	}
	p := start(t, sub, url, "run", "--ttl", ttl.String(), "--owner", owner, k, "--", "sh", "-c",
		`echo "$LOCKER_TOKEN" > token; while [ ! -e ../go ]; do sleep 0.05; done`)
	t.Cleanup(func() { _ = os.WriteFile(filepath.Join(dir, "go"), nil, 0o600) })
	return waitFile(t, p, sub, "token")
}

// TestLs: "lockctl ls PREFIX" shows the keys held under PREFIX with their
// holders and tokens, and nothing else, as a table and as JSON.
func TestLs(t *testing.T) {
	for _, s := range storeurl.Backends {
		t.Run(s.Name, func(t *testing.T) {
			url, dir, prefix := s.URL(t), t.TempDir(), key(t)+"/"
			tokens := map[string]string{
				prefix + "a": holdKey(t, dir, url, prefix+"a", "holder-a"),
				prefix + "b": holdKey(t, dir, url, prefix+"b", "holder-b"),
			}
			holdKey(t, dir, url, key(t)+"-outside", "holder-c") // not under prefix

			code, out, errOut := run(t, dir, url, "ls", prefix)
			if code != 0 {
				t.Fatalf("ls: exit %d: %s", code, errOut)
			}
			lines := strings.Split(strings.TrimSpace(out), "\n")
			if len(lines) != 3 || !strings.HasPrefix(lines[0], "KEY") {
				t.Fatalf("ls %s must print a header and the two held keys:\n%s", prefix, out)
			}
			for i, k := range []string{prefix + "a", prefix + "b"} {
				f := strings.Fields(lines[i+1])
				if len(f) < 3 || f[0] != k || f[1] != "holder-"+k[len(k)-1:] || f[2] != tokens[k] {
					t.Errorf("ls line %q; want %s, its owner and token %s", lines[i+1], k, tokens[k])
				}
			}

			code, out, errOut = run(t, dir, url, "ls", "--json", prefix)
			if code != 0 {
				t.Fatalf("ls --json: exit %d: %s", code, errOut)
			}
			var got []struct {
				Key   string `json:"key"`
				Held  bool   `json:"held"`
				Owner string `json:"owner"`
				Token json.Number
			}
			if err := json.Unmarshal([]byte(out), &got); err != nil {
				t.Fatalf("ls --json: %v in %q", err, out)
			}
			if len(got) != 2 {
				t.Fatalf("ls --json %s = %s; want the two held keys", prefix, out)
			}
			for _, g := range got {
				if !g.Held || g.Token.String() != tokens[g.Key] || g.Owner != "holder-"+g.Key[len(g.Key)-1:] {
					t.Errorf("ls --json entry %+v; want held with token %s", g, tokens[g.Key])
				}
			}

			code, out, _ = run(t, dir, url, "ls", "--json", prefix+"none")
			if code != 0 || strings.TrimSpace(out) != "[]" {
				t.Errorf("ls --json of an empty prefix: exit %d, %q; want 0 and []", code, out)
			}
		})
	}
}

// TestTop runs "lockctl top" in a terminal as a person would: in a tmux
// session, whose screen must show a held key with its holder, then q
// quits.
func TestTop(t *testing.T) {
	tmux, err := exec.LookPath("tmux")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("tmux is needed to test lockctl top in a terminal: %v", err)
		}
		t.Skipf("tmux is needed to test lockctl top in a terminal: %v", err)
	}
	s := storeurl.Backends[0]
	url, dir, prefix := s.URL(t), t.TempDir(), key(t)+"/"
	token := holdKey(t, dir, url, prefix+"nightly", "top-holder")

	sock := filepath.Join(dir, "tmux.sock") // a tmux server of the test's own
	tm := func(args ...string) (string, error) {
		out, err := exec.Command(tmux, append([]string{"-S", sock}, args...)...).CombinedOutput()
		return string(out), err
	}
	if out, err := tm("new-session", "-d", "-s", "top", "-x", "160", "-y", "30", "-e", "LOCKER_URL="+url,
		lockctl, "top", prefix); err != nil {
		t.Fatalf("tmux new-session: %v: %s", err, out)
	}
	t.Cleanup(func() { _, _ = tm("kill-server") })

	deadline := time.Now().Add(bound)
	var screen string
	for {
		screen, _ = tm("capture-pane", "-p", "-t", "top")
		if line := lineWith(screen, prefix+"nightly"); line != "" {
			f := strings.Fields(line)
			if len(f) < 3 || f[1] != "top-holder" || f[2] != token {
				t.Errorf("top shows %q; want the key, its holder top-holder and token %s", line, token)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("top did not show the held key within %v; the screen:\n%s", bound, screen)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if !strings.Contains(screen, "1 held") {
		t.Errorf("top's header must count the held key; the screen:\n%s", screen)
	}
	quits := func(session, keys string) {
		t.Helper()
		if out, err := tm("send-keys", "-t", session, keys); err != nil {
			t.Fatalf("tmux send-keys: %v: %s", err, out)
		}
		for {
			if _, err := tm("has-session", "-t", session); err != nil {
				return // top quit, and its session ended with it
			}
			if time.Now().After(deadline) {
				screen, _ := tm("capture-pane", "-p", "-t", session)
				t.Fatalf("top did not quit on %s within %v; the screen:\n%s", keys, bound, screen)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	quits("top", "q")

	// Ctrl-C quits too, once the first screen is up.
	if out, err := tm("new-session", "-d", "-s", "top2", "-x", "160", "-y", "30", "-e", "LOCKER_URL="+url,
		lockctl, "top", prefix); err != nil {
		t.Fatalf("tmux new-session: %v: %s", err, out)
	}
	for screen, _ = tm("capture-pane", "-p", "-t", "top2"); !strings.Contains(screen, "q quits"); screen, _ = tm("capture-pane", "-p", "-t", "top2") {
		if time.Now().After(deadline) {
			t.Fatalf("top did not draw within %v; the screen:\n%s", bound, screen)
		}
		time.Sleep(100 * time.Millisecond)
	}
	quits("top2", "C-c")
}

// lineWith is the first line of screen that contains s, or "".
func lineWith(screen, s string) string {
	for line := range strings.Lines(screen) {
		if strings.Contains(line, s) {
			return strings.TrimSpace(line)
		}
	}
	return ""
}
