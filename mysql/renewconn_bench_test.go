package mysql_test

import (
	"testing"

	"github.com/golocker/locker"
	"github.com/golocker/locker/internal/renewtest"
	"github.com/golocker/locker/mysql"
)

// BenchmarkRenewal measures what the renewal connection costs: one lock's
// renewal (an Extend, which runs a round's statement) and an uncontended
// Lock+Unlock, on a PollOnly Locker (run with -bench=Renewal).
func BenchmarkRenewal(b *testing.B) {
	open := func(b *testing.B) locker.Locker {
		l, err := mysql.Config{PollOnly: true}.New(openDB(b, exampleDSN))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = l.Close() })
		return l
	}
	renewtest.Bench(b, open)
}
