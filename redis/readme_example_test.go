package redis_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/golocker/locker"
	"github.com/golocker/locker/redis"
)

// The README's quick start: a Locker on the caller's own go-redis client,
// and a job that runs on one replica and is skipped on the others.
func Example_quickStart() {
	ctx := context.Background()
	rdb := goredis.NewClient(&goredis.Options{Addr: redisAddr, ContextTimeoutEnabled: true})
	defer rdb.Close()
	l, err := redis.New(rdb, locker.WithTTL(10*time.Second))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer l.Close()

	err = locker.TryDo(ctx, l, "quickstart:report", func(ctx context.Context) error {
		fmt.Println("generating the report") // ctx ends if the lock is lost
		return nil
	})
	if errors.Is(err, locker.ErrNotAcquired) {
		fmt.Println("skipped: another replica has it")
	}
	// Output: generating the report
}
