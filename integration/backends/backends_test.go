package backends_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/golocker/locker"
	"github.com/golocker/locker/backends"
	"github.com/golocker/locker/internal/etcdserver"
	"github.com/golocker/locker/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func newMux(t *testing.T) *locker.Mux {
	t.Helper()
	var m locker.Mux
	if err := backends.Register(&m); err != nil {
		t.Fatal(err)
	}
	return &m
}

// exercise opens url, checks that the Locker excludes a second Locker opened
// from the same URL, and closes both.
func exercise(t *testing.T, m *locker.Mux, url string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	a, err := locker.Open(ctx, m, url)
	if err != nil {
		t.Fatalf("Open(%s): %v", url, err)
	}
	defer a.Close()
	b, err := locker.Open(ctx, m, url)
	if err != nil {
		t.Fatalf("Open(%s): %v", url, err)
	}
	defer b.Close()
	key := "url-" + strings.ReplaceAll(t.Name(), "/", "-")
	lk, err := a.TryLock(ctx, key)
	if err != nil {
		t.Fatalf("TryLock through %s: %v", url, err)
	}
	if _, err := b.TryLock(ctx, key); !errors.Is(err, locker.ErrNotAcquired) {
		t.Fatalf("a second Locker from the same URL must be refused: %v", err)
	}
	if err := lk.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestEverySchemeOpens(t *testing.T) {
	m := newMux(t)
	if got := strings.Join(m.Schemes(), ","); got != "etcd,etcds,mysql,postgres,postgresql,redis,rediss,redlock,redlocks,zk" {
		t.Fatalf("Register must add the built-in schemes, got %s", got)
	}
	t.Run("redis", func(t *testing.T) {
		t.Parallel()
		exercise(t, m, "redis://"+testenv.Redis(t).Addr()+"/0?ttl=3s&prefix=url-test/")
	})
	t.Run("redis-cluster", func(t *testing.T) {
		t.Parallel()
		exercise(t, m, "redis://"+strings.Join(testenv.RedisCluster(t).Addrs(), ",")+"?ttl=3s")
	})
	t.Run("mysql", func(t *testing.T) {
		t.Parallel()
		cfg, err := gomysql.ParseDSN(testenv.NewDatabase(t))
		if err != nil {
			t.Fatal(err)
		}
		exercise(t, m, "mysql://"+cfg.User+"@"+cfg.Addr+"/"+cfg.DBName+"?table=url_locks&ttl=3s")
		exercise(t, m, "mysql://"+cfg.User+"@"+cfg.Addr+"/"+cfg.DBName+"?table=url_poll_locks&poll_only=true&skip_migration=false&timeout=5s&ttl=3s")
	})
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		u := testenv.Postgres(t).URL()
		exercise(t, m, u+"&table=url_locks&ttl=3s")
		exercise(t, m, strings.Replace(u, "postgres://", "postgresql://", 1)+"&table=url_poll_locks&poll_only=true&skip_migration=false&connect_timeout=5&ttl=3s")
	})
	t.Run("etcd", func(t *testing.T) {
		t.Parallel()
		eps, ok := testenv.EtcdEndpoints()
		if !ok {
			srv, err := etcdserver.Start(t.Context(), etcdserver.Config{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { srv.Close() })
			eps = srv.Endpoints()
		}
		for i, ep := range eps {
			eps[i] = strings.TrimPrefix(ep, "http://")
		}
		exercise(t, m, "etcd://"+strings.Join(eps, ",")+"?ttl=3s&dial_timeout=10s")
	})
	t.Run("zk", func(t *testing.T) {
		t.Parallel()
		exercise(t, m, "zk://"+strings.Join(testenv.ZooKeeper(t).Servers(), ",")+"/url-locks?ttl=3s")
	})
	t.Run("zk-digest", func(t *testing.T) {
		t.Parallel()
		exercise(t, m, "zk://locker:s3cret@"+strings.Join(testenv.ZooKeeper(t).Servers(), ",")+"/url-locks-digest?ttl=3s")
	})
	t.Run("zk-acl", func(t *testing.T) {
		t.Parallel()
		exercise(t, m, "zk://locker:s3cret@"+strings.Join(testenv.ZooKeeper(t).Servers(), ",")+"/url-locks-acl?ttl=3s&acl=creator,world-read")
	})
}

func TestBadBackendURLs(t *testing.T) {
	m := newMux(t)
	cases := []struct{ url, says string }{
		{"redis://", "has no host"},
		{"redis://127.0.0.1:1/0?bogus=1", "bogus"},
		{"mysql://a:1,b:2/db", "one host"},
		{"mysql://127.0.0.1:1/db?table=bad-name", "table"},
		{"mysql://127.0.0.1:1/db?nosuchparam=1", "unknown parameters nosuchparam"},
		{"mysql://127.0.0.1:1/db?skip_migration=maybe", "skip_migration"},
		{"postgres://127.0.0.1:1/db?table=bad-name", "Config.Table"},
		{"postgres://127.0.0.1:1/db?poll_only=maybe", "poll_only"},
		{"postgres://u:pw@0.0.0.0:1/db", "cleartext"},
		{"postgresql://u:pw@0.0.0.0:1/db?sslmode=prefer", "cleartext"},
		{"postgres://,127.0.0.1:1/db", "empty host"},
		{"etcd://127.0.0.1:1?dial_timeout=forever", "dial_timeout"},
		{"etcd://127.0.0.1:1?what=1", "what"},
		{"zk://127.0.0.1:1?x=1", "unknown parameters x"},
		{"zk://,127.0.0.1:1", "empty host"},
		{"zk://justauser@127.0.0.1:1", "user:password"},
		{"zk://127.0.0.1:1?acl=creator", "acl"},
		{"zk://127.0.0.1:1?acl=world:anyone:rwx", "acl"},
		{"zk://127.0.0.1:1?acl=", "acl"},
		{"redis://u:pw@0.0.0.0:1/0", "cleartext"},
		{"etcd://u:pw@0.0.0.0:1", "cleartext"},
		{"mysql://u:pw@0.0.0.0:1/db", "cleartext"},
		{"mysql://u:pw@0.0.0.0:1/db?tls=preferred", "cleartext"},
		{"zk://u:pw@0.0.0.0:1", "cleartext"},
		{"redis://u:pw@0.0.0.0:1/0?insecure=maybe", "insecure"},
		{"memcached://127.0.0.1:11211", "known schemes: etcd, etcds, mysql, postgres, postgresql, redis, rediss, redlock, redlocks, zk"},
	}
	for _, c := range cases {
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		l, err := locker.Open(ctx, m, c.url)
		cancel()
		if err == nil {
			l.Close()
			t.Errorf("Open(%q) must fail", c.url)
			continue
		}
		if !strings.Contains(err.Error(), c.says) {
			t.Errorf("Open(%q) = %v; the error must say %q", c.url, err, c.says)
		}
	}
}

// TestCleartextPasswordNeedsConsent: a password may go in cleartext to
// this machine, and elsewhere only with insecure=true (the open then fails
// further on, on 0.0.0.0:1: not loopback by the URL check, yet a dial
// that never leaves this machine and is refused at once).
func TestCleartextPasswordNeedsConsent(t *testing.T) {
	m := newMux(t)
	// Each open waits out its client's dial retries: they run at once.
	for _, u := range []string{
		"redis://u:pw@0.0.0.0:1/0?insecure=true&dial_timeout=100ms",
		"mysql://u:pw@0.0.0.0:1/db?insecure=true&timeout=100ms",
		"etcd://u:pw@0.0.0.0:1?insecure=true&dial_timeout=100ms",
	} {
		scheme, _, _ := strings.Cut(u, ":")
		t.Run(scheme, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
			l, err := locker.Open(ctx, m, u)
			cancel()
			if err == nil {
				_ = l.Close()
				t.Fatalf("Open(%q) must fail on the unreachable address", u)
			}
			if strings.Contains(err.Error(), "cleartext") {
				t.Errorf("Open(%q) refused the password although insecure=true: %v", u, err)
			}
		})
	}
	for _, h := range []string{"127.0.0.1:1", "localhost:1", "[::1]:1"} {
		t.Run(h, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
			l, err := locker.Open(ctx, m, "redis://u:pw@"+h+"/0?dial_timeout=100ms")
			cancel()
			if err == nil {
				_ = l.Close()
			} else if strings.Contains(err.Error(), "cleartext") {
				t.Errorf("a password to %s (this machine) must be allowed: %v", h, err)
			}
		})
	}
}
