//go:build unix

package lockctl_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/golocker/locker/integration/internal/storeurl"
)

// holdPermits starts a "lockctl run --limit limit --permits n" that holds n
// permits of k as owner until the file "go" appears in dir, and returns its
// token.
func holdPermits(t *testing.T, dir, url, k, owner, limit, n string) string {
	t.Helper()
	sub := filepath.Join(dir, owner)
	if err := os.MkdirAll(sub, 0o700); err != nil {
		t.Fatal(err)
	}
	p := start(t, sub, url, "run", "--ttl", ttl.String(), "--owner", owner, "--limit", limit, "--permits", n, k, "--", "sh", "-c",
		`echo "$LOCKER_TOKEN" > token; while [ ! -e ../go ]; do sleep 0.05; done`)
	t.Cleanup(func() { _ = os.WriteFile(filepath.Join(dir, "go"), nil, 0o600) })
	return waitFile(t, p, sub, "token")
}

// TestSemaphore: "lockctl run --limit M --permits N" runs commands under
// permits of a semaphore (no more than M at once: a --try beyond them exits
// 75; a disagreeing --limit exits 2 naming both), and "lockctl inspect"
// shows its holders, limit and permits in use, as text and as JSON.
func TestSemaphore(t *testing.T) {
	for _, s := range storeurl.Backends {
		t.Run(s.Name, func(t *testing.T) {
			url := s.URL(t)
			dir, k := t.TempDir(), key(t)
			tokens := map[string]string{
				"render-a": holdPermits(t, dir, url, k, "render-a", "3", "1"),
				"render-b": holdPermits(t, dir, url, k, "render-b", "3", "2"),
			}

			code, _, errOut := run(t, dir, url, "run", "--try", "--limit", "3", k, "--", "sh", "-c", "echo ran >> ran")
			if code != 75 || !strings.Contains(errOut, "permits") {
				t.Errorf("run --try --limit 3 with the 3 permits held must exit 75 saying so: exit %d, stderr %q", code, errOut)
			}
			if fileExists(dir, "ran") {
				t.Errorf("run --try with no permit free must not run its command")
			}
			code, _, errOut = run(t, dir, url, "run", "--try", "--limit", "5", k, "--", "true")
			if msg := strings.ReplaceAll(errOut, k, ""); code != 2 || !strings.Contains(msg, "3") || !strings.Contains(msg, "5") {
				t.Errorf("run --limit 5 on a semaphore of 3 must exit 2 naming both limits: exit %d, stderr %q", code, errOut)
			}

			code, out, errOut := run(t, dir, url, "inspect", "--json", k)
			if code != 0 {
				t.Fatalf("inspect --json: exit %d, stderr %q", code, errOut)
			}
			var st struct {
				Held    bool `json:"held"`
				Limit   int  `json:"limit"`
				InUse   int  `json:"in_use"`
				Waiters int  `json:"waiters"`
				Holders []struct {
					Mode   string `json:"mode"`
					Weight int    `json:"weight"`
					Owner  string `json:"owner"`
					Token  uint64 `json:"token"`
				} `json:"holders"`
			}
			if err := json.Unmarshal([]byte(out), &st); err != nil {
				t.Fatalf("inspect --json: %v\n%s", err, out)
			}
			if !st.Held || st.Limit != 3 || st.InUse != 3 || len(st.Holders) != 2 {
				t.Errorf("inspect --json of a semaphore of 3 with 1+2 permits held: %s", out)
			}
			var owners []string
			for _, h := range st.Holders {
				owners = append(owners, h.Owner)
				want := map[string]int{"render-a": 1, "render-b": 2}[h.Owner]
				if h.Mode != "permits" || h.Weight != want || tokens[h.Owner] != strings.TrimSpace(jsonNumber(h.Token)) {
					t.Errorf("inspect --json gives holder %+v; want mode permits, weight %d, token %s", h, want, tokens[h.Owner])
				}
			}
			if slices.Sort(owners); !slices.Equal(owners, []string{"render-a", "render-b"}) {
				t.Errorf("inspect --json lists the holders %v, want render-a and render-b", owners)
			}

			code, out, _ = run(t, dir, url, "inspect", k)
			for _, want := range []string{"semaphore", "limit:", "in use:", "render-a", "render-b", tokens["render-a"]} {
				if code != 0 || !strings.Contains(out, want) {
					t.Errorf("inspect of a semaphore must show %q: exit %d\n%s", want, code, out)
				}
			}
		})
	}
}

// jsonNumber is n as JSON writes it.
func jsonNumber(n uint64) string {
	b, _ := json.Marshal(n)
	return string(b)
}
