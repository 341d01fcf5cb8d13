package etcd_test

import (
	"testing"

	"github.com/golocker/locker"
	"github.com/golocker/locker/integration/internal/sharedbench"
)

// BenchmarkSharedUncontended: see sharedbench.Uncontended.
func BenchmarkSharedUncontended(b *testing.B) {
	sharedbench.Uncontended(b, benchLocker(b, newClient(b, benchEtcd(b))), uniqueKey(b))
}

// BenchmarkSharedHandoff: see sharedbench.Handoff.
func BenchmarkSharedHandoff(b *testing.B) {
	eps := benchEtcd(b)
	sharedbench.Handoff(b, benchLocker(b, newClient(b, eps)), benchLocker(b, newClient(b, eps)), uniqueKey(b))
}

// BenchmarkSharedThroughput: see sharedbench.Throughput.
//
//	go test -run '^$' -bench SharedThroughput ./integration/etcd/
func BenchmarkSharedThroughput(b *testing.B) {
	eps := benchEtcd(b)
	sharedbench.Throughput(b, func() locker.Locker { return benchLocker(b, newClient(b, eps)) }, uniqueKey(b))
}
