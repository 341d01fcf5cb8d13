package zookeeper_test

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/golocker/locker/internal/testenv"
)

// createForm is one way to add a lock node to a queue, followed by the
// node's deletion.
type createForm struct {
	name string
	add  func(c *zk.Conn, parent string) (string, error)
}

// createForms are the creates BenchmarkCreateForms compares: zk.Lock's
// plain create, this library's multi-operation with a write of the key's
// node, the same multi-operation with a check or with nothing instead of
// the write, and a plain create followed by a listing of the queue.
var createForms = []createForm{
	{"create", func(c *zk.Conn, parent string) (string, error) {
		return c.Create(parent+"/n-", nil, zk.FlagEphemeral|zk.FlagSequence, zk.WorldACL(zk.PermAll))
	}},
	{"multi-setdata", func(c *zk.Conn, parent string) (string, error) {
		return multiCreate(c, parent, &zk.SetDataRequest{Path: parent, Version: -1})
	}},
	{"multi-check", func(c *zk.Conn, parent string) (string, error) {
		return multiCreate(c, parent, &zk.CheckVersionRequest{Path: parent, Version: -1})
	}},
	{"multi", func(c *zk.Conn, parent string) (string, error) { return multiCreate(c, parent) }},
	{"create-children", func(c *zk.Conn, parent string) (string, error) {
		p, err := c.Create(parent+"/n-", nil, zk.FlagEphemeral|zk.FlagSequence, zk.WorldACL(zk.PermAll))
		if err == nil {
			_, _, err = c.Children(parent)
		}
		return p, err
	}},
}

// multiCreate creates an ephemeral sequential node under parent in a
// multi-operation with more, and returns its path.
func multiCreate(c *zk.Conn, parent string, more ...any) (string, error) {
	ops := append([]any{&zk.CreateRequest{Path: parent + "/n-", Acl: zk.WorldACL(zk.PermAll), Flags: zk.FlagEphemeral | zk.FlagSequence}}, more...)
	res, err := c.Multi(ops...)
	if err != nil {
		return "", err
	}
	return res[0].String, nil
}

// BenchmarkCreateForms measures the server's CPU time per create and
// delete of a lock node, for each of createForms: 8 clients, each on a
// session of its own, loop over the form for 2 s, the forms taking turns
// five times (the first not counted). It reports <form>-server-cpu-µs and
// <form>-x-create, the ratio to zk.Lock's plain create, on the test server
// and on the production-like one.
//
//	go test -run '^$' -bench CreateForms ./integration/zookeeper/
func BenchmarkCreateForms(b *testing.B) {
	for _, server := range []struct {
		name string
		srv  func(testing.TB) *testenv.ZooKeeperServer
	}{{"test", testenv.ZooKeeper}, {"production", testenv.ZooKeeperProduction}} {
		b.Run("server="+server.name, func(b *testing.B) {
			srv := server.srv(b)
			if _, err := srv.CPU(); err != nil {
				b.Skipf("cannot read the server's CPU time: %v", err)
			}
			createFormsOn(b, srv)
		})
	}
}

// createFormsOn runs BenchmarkCreateForms on srv.
func createFormsOn(b *testing.B, srv *testenv.ZooKeeperServer) {
	const clients, rounds, turn = 8, 5, 2 * time.Second
	conns := make([]*zk.Conn, clients)
	for i := range conns {
		conns[i], _ = connectWith(b, srv, 10*time.Second)
	}
	parent := "/createforms-" + uniqueKey(b)
	if _, err := conns[0].Create(parent, nil, 0, zk.WorldACL(zk.PermAll)); err != nil && !errors.Is(err, zk.ErrNodeExists) {
		b.Fatal(err)
	}
	cpu := make([]time.Duration, len(createForms))
	ops := make([]int, len(createForms))
	for round := range rounds {
		for f, form := range createForms {
			c0, err := srv.CPU()
			if err != nil {
				b.Fatal(err)
			}
			var mu sync.Mutex
			var wg sync.WaitGroup
			n := 0
			stop := time.Now().Add(turn)
			for _, c := range conns {
				wg.Go(func() {
					k := 0
					for time.Now().Before(stop) {
						p, err := form.add(c, parent)
						if err == nil {
							err = c.Delete(p, -1)
						}
						if err != nil {
							b.Errorf("%s: %v", form.name, err)
							return
						}
						k++
					}
					mu.Lock()
					n += k
					mu.Unlock()
				})
			}
			wg.Wait()
			c1, err := srv.CPU()
			if err != nil {
				b.Fatal(err)
			}
			if round > 0 {
				cpu[f] += c1 - c0
				ops[f] += n
			}
		}
	}
	per := func(f int) float64 { return float64(cpu[f]) / float64(time.Microsecond) / float64(max(ops[f], 1)) }
	for f, form := range createForms {
		b.ReportMetric(per(f), form.name+"-server-cpu-µs")
		if f > 0 {
			b.ReportMetric(per(f)/per(0), form.name+"-x-create")
		}
	}
	b.ReportMetric(0, "ns/op")
}
