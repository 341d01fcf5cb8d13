package zookeeper_test

import (
	"bytes"
	"crypto/rand"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/golocker/locker"
	"github.com/golocker/locker/internal/rerun"
	"github.com/golocker/locker/internal/testenv"
	"github.com/golocker/locker/zookeeper"
)

// TestSetDataNeedsWrite: SetData rewrites the holder's node on a
// connection whose ACL grants it WRITE there (Config.Digest), visible to
// another Locker's Inspect with the token unchanged. On a connection
// without credentials, whose lock nodes are READ-only, it fails matching
// errors.ErrUnsupported and naming the way out, and the lock and its data
// stay as they were. (The conformance harness has no credentials: its
// Data case skips its SetData part.) A round in which the holder lost its
// lock only because no renewal came back in time (rerun.StarvedLoss) says
// nothing of SetData, and runs again, up to three rounds; any other loss
// fails at once.
func TestSetDataNeedsWrite(t *testing.T) {
	srv := testenv.ZooKeeper(t)
	ctx := t.Context()
	for _, tc := range []struct {
		name string
		cfg  zookeeper.Config
		ok   bool
	}{
		{"digest", zookeeper.Config{Root: "/locker-data-" + rand.Text()[:10], Digest: "locker:s3cret"}, true},
		{"anonymous", zookeeper.Config{Root: "/locker-data-" + rand.Text()[:10]}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := configLocker(t, srv, tc.cfg), configLocker(t, srv, tc.cfg)
			rerun.Starved(t, 3, func(i int) error {
				key := fmt.Sprintf("k%d", i)
				lk, err := a.TryLock(ctx, key, locker.WithData([]byte("one")))
				if err != nil {
					t.Fatal(err)
				}
				var f findings
				want := []byte("one")
				err = locker.SetData(ctx, lk, []byte("two\x00three"))
				switch {
				case tc.ok && err != nil:
					f.errorf("SetData with WRITE on the lock node: %v", err)
				case tc.ok:
					want = []byte("two\x00three")
				case !errors.Is(err, errors.ErrUnsupported) || !strings.Contains(err.Error(), "Config.Digest"):
					f.errorf("SetData on a READ-only lock node = %v; want errors.ErrUnsupported naming Config.Digest", err)
				}
				if st, err := locker.Inspect(ctx, b, key); err != nil || !st.Held || st.Token != lk.Token() || !bytes.Equal(st.Data, want) {
					f.errorf("Inspect = held %v, token %d, data %q, %v; want held, token %d, data %q", st.Held, st.Token, st.Data, err, lk.Token(), want)
				}
				return f.settle(ctx, t, lk)
			})
		})
	}
}
