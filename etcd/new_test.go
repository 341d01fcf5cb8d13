package etcd_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

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

// TestNewContextBoundsTheFirstGrant: against an endpoint that does not
// answer, NewContext returns when its ctx ends (New alone would wait 30 s)
// and names the endpoint.
func TestNewContextBoundsTheFirstGrant(t *testing.T) {
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{"127.0.0.1:1"}, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	l, err := etcd.NewContext(ctx, cli, locker.WithTTL(2*time.Second))
	if err == nil {
		_ = l.Close()
		t.Fatal("NewContext against an endpoint that does not answer must fail")
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("NewContext took %v with a ctx of 300ms", took)
	}
	if !strings.Contains(err.Error(), "127.0.0.1:1") {
		t.Errorf("NewContext = %v; want an error naming the endpoint", err)
	}
}
