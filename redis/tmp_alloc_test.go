package redis

import (
	"testing"

	"github.com/golocker/locker"
)

func BenchmarkTmpOurs(b *testing.B) {
	srv := benchServer(b)
	l, _ := newTestLocker(b, newClient(b, srv.Addr()), locker.WithTTL(benchTTL))
	ctx := b.Context()
	key := uniqueKey(b)
	b.ReportAllocs()
	for b.Loop() {
		lk, err := l.Lock(ctx, key)
		if err != nil {
			b.Fatal(err)
		}
		if err := lk.Unlock(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkTmpFloor(b *testing.B) {
	srv := benchServer(b)
	f := newFloor(b, srv.Addr())
	ctx := b.Context()
	key := uniqueKey(b)
	b.ReportAllocs()
	for b.Loop() {
		if ok, err := f.tryLock(ctx, key, "owner"); err != nil || !ok {
			b.Fatal(ok, err)
		}
		if n, err := f.release(ctx, key, "owner"); err != nil || n != 1 {
			b.Fatal(n, err)
		}
	}
}
