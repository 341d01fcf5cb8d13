package redis_test

import (
	"context"
	"crypto/rand"
	"errors"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/golocker/locker"
	"github.com/golocker/locker/internal/storeenv"
	"github.com/golocker/locker/redis"
)

// TestOpenProtocol: the clients of Open, OpenCluster and OpenRedlock speak
// the RESP version of parameter protocol (go-redis's default, RESP3,
// without it), as the server sees them (CLIENT LIST's resp field); any
// other value is a bad URL naming the parameter.
func TestOpenProtocol(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	single := storeenv.Redis(t).Addr()
	cluster := storeenv.RedisCluster(t).Addrs()
	opens := []struct {
		name  string
		open  locker.OpenFunc
		hosts []string // in the URL
		nodes []string // whose CLIENT LIST shows the Locker's connections
	}{
		{"Open", redis.Open, []string{single}, []string{single}},
		{"OpenCluster", redis.OpenCluster, cluster, cluster},
		// Three databases of one server stand for three masters.
		{"OpenRedlock", redis.OpenRedlock, []string{single, single, single}, []string{single}},
	}
	for _, o := range opens {
		t.Run(o.name, func(t *testing.T) {
			for _, tc := range []struct{ query, want string }{
				{"", "3"},
				{"&protocol=2", "2"},
				{"&protocol=3", "3"},
			} {
				name := "resp-" + rand.Text()
				u := mustURL(t, "redis://"+strings.Join(o.hosts, ",")+"/?client_name="+name+tc.query)
				if o.name == "OpenRedlock" {
					u.Scheme = "redlock"
				}
				l, err := o.open(ctx, u)
				if err != nil {
					t.Errorf("%s(%s) = %v", o.name, u.Redacted(), err)
					continue
				}
				got := respOf(ctx, t, o.nodes, name)
				if err := l.Close(); err != nil {
					t.Errorf("Close: %v", err)
				}
				if len(got) == 0 {
					t.Errorf("%s(%s): no connection named %s in CLIENT LIST", o.name, u.Redacted(), name)
				}
				for _, resp := range got {
					if resp != tc.want {
						t.Errorf("%s(%s): a connection speaks RESP%s; want RESP%s", o.name, u.Redacted(), resp, tc.want)
					}
				}
			}
			for _, bad := range []string{"", "1", "4", "resp3"} {
				u := mustURL(t, "redis://"+strings.Join(o.hosts, ",")+"/?protocol="+bad)
				if o.name == "OpenRedlock" {
					u.Scheme = "redlock"
				}
				l, err := o.open(ctx, u)
				if err == nil {
					_ = l.Close()
					t.Errorf("%s(%s) must fail", o.name, u.Redacted())
					continue
				}
				if !errors.Is(err, locker.ErrBadURL) || !strings.Contains(err.Error(), "parameter protocol=") {
					t.Errorf("%s(%s) = %v; want ErrBadURL naming parameter protocol", o.name, u.Redacted(), err)
				}
			}
		})
	}
}

func mustURL(t *testing.T, raw string) *url.URL {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// respOf returns the RESP version (CLIENT LIST's resp field) of every
// connection named name on the servers at addrs.
func respOf(ctx context.Context, t *testing.T, addrs []string, name string) []string {
	t.Helper()
	var out []string
	for _, addr := range addrs {
		admin := goredis.NewClient(&goredis.Options{Addr: addr})
		list, err := admin.ClientList(ctx).Result()
		_ = admin.Close()
		if err != nil {
			t.Fatalf("CLIENT LIST on %s: %v", addr, err)
		}
		for line := range strings.Lines(list) {
			fields := strings.Fields(line)
			if !slices.Contains(fields, "name="+name) {
				continue
			}
			for _, f := range fields {
				if v, ok := strings.CutPrefix(f, "resp="); ok {
					out = append(out, v)
				}
			}
		}
	}
	return out
}
