package backends_test

import (
	"context"
	"net/url"
	"testing"
	"time"

	"github.com/golocker/locker"
	"github.com/golocker/locker/etcd"
	"github.com/golocker/locker/integration/internal/secreturl"
	"github.com/golocker/locker/internal/testenv"
	"github.com/golocker/locker/mysql"
	"github.com/golocker/locker/postgres"
	"github.com/golocker/locker/redis"
	"github.com/golocker/locker/zookeeper"
)

// openBound bounds every open of the secret-URL table: the URLs name a
// closed port, so only the stores that wait for a session use it up.
const openBound = 2 * time.Second

// openers are every backend's opener, with the schemes they serve.
var openers = []struct {
	name    string
	schemes []string
	open    locker.OpenFunc
}{
	{"redis.Open", []string{"redis", "rediss"}, redis.Open},
	{"redis.OpenCluster", []string{"redis", "rediss"}, redis.OpenCluster},
	{"redis.OpenSentinel", []string{"redis", "rediss"}, redis.OpenSentinel},
	{"redis.OpenRedlock", []string{"redlock", "redlocks"}, redis.OpenRedlock},
	{"mysql.Open", []string{"mysql"}, mysql.Open},
	{"postgres.Open", []string{"postgres", "postgresql"}, postgres.Open},
	{"etcd.Open", []string{"etcd", "etcds"}, etcd.Open},
	{"zookeeper.Open", []string{"zk"}, zookeeper.Open},
}

// parallel is how many opens of the secret-URL table for scheme run at
// once: all of etcd's, whose client dials in the background until the
// open's ctx ends (each open waits out openBound, taking no CPU), and 48 of
// the others', whose opens take CPU until the refusal.
func parallel(scheme string) int {
	if scheme == "etcd" || scheme == "etcds" {
		return secreturl.Size()
	}
	return 48
}

// errText opens with open and returns the error's text; a URL that opens
// fails t.
func errText(t *testing.T, raw string, open func(ctx context.Context) (locker.Locker, error)) string {
	ctx, cancel := context.WithTimeout(t.Context(), openBound)
	defer cancel()
	l, err := open(ctx)
	if err == nil {
		_ = l.Close()
		t.Errorf("%s must not open", raw)
		return ""
	}
	return err.Error()
}

// TestNoPasswordInErrors: no error of locker.Open or of a backend's opener
// shows a URL's password, however malformed the URL, and hiding it leaves
// the rest of the message as it is (see package secreturl). The openers
// run in parallel subtests: most of their opens wait out openBound on the
// closed port.
func TestNoPasswordInErrors(t *testing.T) {
	port, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	m := newMux(t)
	for _, scheme := range m.Schemes() {
		t.Run("Open/"+scheme, func(t *testing.T) {
			t.Parallel()
			secreturl.Check(t, scheme, port, parallel(scheme), func(raw string) (string, bool) {
				return errText(t, raw, func(ctx context.Context) (locker.Locker, error) { return locker.Open(ctx, m, raw) }), true
			})
		})
	}
	for _, o := range openers {
		for _, scheme := range o.schemes {
			t.Run(o.name+"/"+scheme, func(t *testing.T) {
				t.Parallel()
				secreturl.Check(t, scheme, port, parallel(scheme), func(raw string) (string, bool) {
					u, err := url.Parse(raw)
					if err != nil || u.Scheme != scheme {
						return "", false
					}
					return errText(t, raw, func(ctx context.Context) (locker.Locker, error) { return o.open(ctx, u) }), true
				})
			})
		}
	}
}
