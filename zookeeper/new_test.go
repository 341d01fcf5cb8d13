package zookeeper_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/go-zookeeper/zk"

	"github.com/golocker/locker"
	"github.com/golocker/locker/zookeeper"
)

// TestNewRefusesZeroClients: a connection that was not made by zk.Connect
// is refused by New with an error naming it, never a hang later.
func TestNewRefusesZeroClients(t *testing.T) {
	for name, c := range map[string]*zk.Conn{"zero": {}, "nil": nil} {
		l, err := zookeeper.New(c, nil)
		if err == nil {
			_ = l.Close()
			t.Errorf("New(%s *zk.Conn) must fail", name)
			continue
		}
		if !errors.Is(err, locker.ErrInvalidOption) || !strings.Contains(err.Error(), "zk.Conn") {
			t.Errorf("New(%s *zk.Conn) = %v; want an error matching ErrInvalidOption that names zk.Conn", name, err)
		}
	}
}
