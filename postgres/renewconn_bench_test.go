package postgres_test

import (
	"testing"

	"github.com/golocker/locker"
	"github.com/golocker/locker/internal/renewtest"
)

// BenchmarkRenewal measures what the renewal connection costs: one lock's
// renewal (an Extend, which runs a round's statement) and an uncontended
// Lock+Unlock, on a pgx pool and on a *sql.DB (run with -bench=Renewal).
func BenchmarkRenewal(b *testing.B) {
	handles := []struct {
		name string
		open func(b *testing.B) locker.Locker
	}{
		{"pgxpool", func(b *testing.B) locker.Locker { return pollLocker(b, testPool(b, exampleURL, nil)) }},
		{"sql.DB", func(b *testing.B) locker.Locker { return pollLocker(b, testDB(b, exampleURL)) }},
	}
	for _, h := range handles {
		b.Run(h.name, func(b *testing.B) { renewtest.Bench(b, h.open) })
	}
}
