//go:build unix

package lockctl_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/golocker/locker/integration/internal/storeurl"
)

// TestData: the data given to "lockctl run --data" is what "inspect",
// "inspect --json" and "ls --json" show of the held key.
func TestData(t *testing.T) {
	const data = "10.0.0.7:8080 run 42"
	for _, s := range storeurl.Backends {
		t.Run(s.Name, func(t *testing.T) {
			url, dir, k := s.URL(t), t.TempDir(), key(t)
			p := start(t, dir, url, "run", "--ttl", ttl.String(), "--owner", "leader", "--data", data, k, "--", "sh", "-c",
				`echo "$LOCKER_TOKEN" > token; while [ ! -e go ]; do sleep 0.05; done`)
			t.Cleanup(func() { _ = os.WriteFile(filepath.Join(dir, "go"), nil, 0o600) })
			waitFile(t, p, dir, "token")

			code, out, errOut := run(t, dir, url, "inspect", k)
			if code != 0 || !strings.Contains(out, "data:") || !strings.Contains(out, data) {
				t.Errorf("inspect: exit %d, %q, %s; want a data line with %q", code, out, errOut, data)
			}
			var one struct {
				Data string `json:"data"`
			}
			code, out, errOut = run(t, dir, url, "inspect", "--json", k)
			if err := json.Unmarshal([]byte(out), &one); code != 0 || err != nil || one.Data != data {
				t.Errorf("inspect --json: exit %d, %v, %q, %s; want data %q", code, err, out, errOut, data)
			}
			var all []struct {
				Key  string `json:"key"`
				Data string `json:"data"`
			}
			code, out, errOut = run(t, dir, url, "ls", "--json", k)
			if err := json.Unmarshal([]byte(out), &all); code != 0 || err != nil || len(all) != 1 || all[0].Data != data {
				t.Errorf("ls --json: exit %d, %v, %q, %s; want one key with data %q", code, err, out, errOut, data)
			}
		})
	}
}
