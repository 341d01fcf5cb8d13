package zookeeper_test

import (
	"testing"

	"github.com/golocker/locker/integration/internal/sharedbench"
	"github.com/golocker/locker/internal/testenv"
)

// BenchmarkSharedUncontended: see sharedbench.Uncontended.
func BenchmarkSharedUncontended(b *testing.B) {
	sharedbench.Uncontended(b, benchLocker(b, testenv.ZooKeeper(b).Servers()[0]), uniqueKey(b))
}

// BenchmarkSharedHandoff: see sharedbench.Handoff.
func BenchmarkSharedHandoff(b *testing.B) {
	addr := testenv.ZooKeeper(b).Servers()[0]
	sharedbench.Handoff(b, benchLocker(b, addr), benchLocker(b, addr), uniqueKey(b))
}
