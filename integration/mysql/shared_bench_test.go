package mysql_test

import (
	"crypto/rand"
	"testing"

	"github.com/golocker/locker/integration/internal/sharedbench"
	"github.com/golocker/locker/internal/testenv"
	"github.com/golocker/locker/mysql"
)

// BenchmarkSharedUncontended: see sharedbench.Uncontended (sem-x-lock and
// rlock-x-lock, target ≤ 1.3), with and without named-lock wake-ups.
func BenchmarkSharedUncontended(b *testing.B) {
	dsn := testenv.NewDatabase(b)
	for name, cfg := range map[string]mysql.Config{"Notify": {}, "PollOnly": {PollOnly: true}} {
		b.Run(name, func(b *testing.B) {
			f := newFleet(b, dsn, cfg)
			f.direct = true
			sharedbench.Uncontended(b, f.newLocker(b), "bench/"+rand.Text()[:8])
		})
	}
}
