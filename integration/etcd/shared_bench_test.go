package etcd_test

import (
	"testing"

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
