package zookeeper_test

import (
	"bytes"
	"crypto/rand"
	"errors"
	"strings"
	"testing"

	"github.com/golocker/locker"
	"github.com/golocker/locker/internal/testenv"
	"github.com/golocker/locker/zookeeper"
)

// TestSetDataNeedsWrite: SetData rewrites the holder's node on a
// connection whose ACL grants it WRITE there (Config.Digest), visible to
// another Locker's Inspect with the token unchanged. On a connection
// without credentials, whose lock nodes are READ-only, it fails matching
// errors.ErrUnsupported and naming the way out, and the lock and its data
// stay as they were. (The conformance harness has no credentials: its
// Data case skips its SetData part.)
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
			lk, err := a.TryLock(ctx, "k", locker.WithData([]byte("one")))
			if err != nil {
				t.Fatal(err)
			}
			defer lk.Unlock(ctx)
			want := []byte("one")
			err = locker.SetData(ctx, lk, []byte("two\x00three"))
			switch {
			case tc.ok && err != nil:
				t.Fatalf("SetData with WRITE on the lock node: %v", err)
			case tc.ok:
				want = []byte("two\x00three")
			case !errors.Is(err, errors.ErrUnsupported) || !strings.Contains(err.Error(), "Config.Digest"):
				t.Errorf("SetData on a READ-only lock node = %v; want errors.ErrUnsupported naming Config.Digest", err)
			}
			st, err := locker.Inspect(ctx, b, "k")
			if err != nil || !st.Held || st.Token != lk.Token() || !bytes.Equal(st.Data, want) {
				t.Errorf("Inspect = held %v, token %d, data %q, %v; want held, token %d, data %q", st.Held, st.Token, st.Data, err, lk.Token(), want)
			}
			select {
			case <-lk.Done():
				t.Fatalf("the holder lost its lock: %v", lk.Err())
			default:
			}
		})
	}
}
