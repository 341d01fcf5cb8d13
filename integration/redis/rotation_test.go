package redis_test

import (
	"context"
	"crypto/rand"
	"log/slog"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/golocker/locker"
	"github.com/golocker/locker/internal/testenv"
	"github.com/golocker/locker/redis"
)

// TestPasswordRotationNamesTheCause: after the password of a Locker's ACL
// user changes and its connections are dropped, every new connection fails
// AUTH. The lock is lost, and its error and the renewal warnings name the
// real cause (WRONGPASS), not a reply of an unexpected type.
func TestPasswordRotationNamesTheCause(t *testing.T) {
	srv := testenv.Redis(t)
	admin := newClient(t, srv.Addr())
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	user := "rotated_" + rand.Text()[:8]
	if err := admin.Do(ctx, "ACL", "SETUSER", user, "on", ">old", "~*", "&*", "+@all").Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = admin.Do(context.Background(), "ACL", "DELUSER", user).Err() })
	o := clientOptions(srv.Addr())
	o.Username, o.Password = user, "old"
	client := goredis.NewClient(o)
	t.Cleanup(func() { _ = client.Close() })
	var logs testenv.LogBuffer
	l, err := redis.New(client, locker.WithTTL(time.Second),
		locker.WithLogger(slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	lk, err := l.Lock(ctx, "rotation")
	if err != nil {
		t.Fatal(err)
	}
	if err := admin.Do(ctx, "ACL", "SETUSER", user, "resetpass", ">new").Err(); err != nil {
		t.Fatal(err)
	}
	if err := admin.Do(ctx, "CLIENT", "KILL", "USER", user).Err(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-lk.Done():
	case <-ctx.Done():
		t.Fatal("the lock was not lost after its user's password changed")
	}
	t.Logf("Err: %v", lk.Err())
	for _, line := range strings.Split(logs.String(), "\n") {
		if strings.Contains(line, "renew") {
			t.Logf("log: %s", line)
		}
	}
	if !strings.Contains(lk.Err().Error(), "WRONGPASS") {
		t.Errorf("Err() = %v; want it to name WRONGPASS", lk.Err())
	}
	if s := logs.String(); strings.Contains(s, "unexpected type") {
		t.Errorf("the log blames a reply type instead of the cause:\n%s", s)
	}
}
