package etcd_test

import (
	"errors"
	"strings"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/golocker/locker"
	"github.com/golocker/locker/etcd"
)

// TestConfigRefusesNegativeDialTimeout: a negative DialTimeout is refused by
// name before the server is asked.
func TestConfigRefusesNegativeDialTimeout(t *testing.T) {
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{"127.0.0.1:1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	_, err = etcd.Config{DialTimeout: -1}.New(cli)
	if !errors.Is(err, locker.ErrInvalidOption) || !strings.Contains(err.Error(), "DialTimeout") {
		t.Fatalf("Config{DialTimeout: -1}.New: %v, want ErrInvalidOption naming DialTimeout", err)
	}
}
