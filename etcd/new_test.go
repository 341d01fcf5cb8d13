package etcd_test

import (
	"errors"
	"strings"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/golocker/locker"
	"github.com/golocker/locker/etcd"
)

// TestNewRefusesZeroClients: a client that was not made by clientv3.New is
// refused by New with an error naming it, never a panic later.
func TestNewRefusesZeroClients(t *testing.T) {
	for name, c := range map[string]*clientv3.Client{"zero": {}, "nil": nil} {
		l, err := etcd.New(c)
		if err == nil {
			_ = l.Close()
			t.Errorf("New(%s client) must fail", name)
			continue
		}
		if !errors.Is(err, locker.ErrInvalidOption) || !strings.Contains(err.Error(), "clientv3.Client") {
			t.Errorf("New(%s client) = %v; want an error matching ErrInvalidOption that names clientv3.Client", name, err)
		}
	}
}
