package redis_test

import (
	"context"
	"crypto/rand"
	"errors"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	scen "github.com/golocker/locker/integration/internal/contend"
)

// fifoEvictAfter is how long a "fifo" waiter waits for its wake-up before
// its attempt drops the clients queued before it, when the keys are free:
// a client that stopped after its release queued it again (the end of a
// run) would block the others.
const fifoEvictAfter = 50 * time.Millisecond

// newFIFO is the "fifo" reference of the one-key and the multi-key
// scenarios: the least a first come, first served lock of the keys (one or
// more) with a token per key costs on Redis, two scripts and one message
// per contended acquisition, and none of the guarantees of this library's
// fair mode beyond order and tokens. It lacks crash recovery of a queued
// client (only the eviction after fifoEvictAfter), cancellation cleanup (a
// cancelled waiter stays queued until evicted), safety against a forged
// message (a PUBLISH to a client's channel makes it try again, never grants
// the keys, but the channel names are guessable), labels, renewal, and
// expiring counters (the tokens' counters never expire). It runs on one
// redis-server, no Cluster slots, Sentinel or Redlock.
//
// The clients queue their ids in one list (the first key's name +
// ":fifo"). An attempt takes the keys when they are free and the caller is
// first in the list or the list is empty, and otherwise queues the caller
// once. A release deletes the keys, publishes a wake-up to the first queued
// client's channel, and queues the releasing client at the end of the
// list, as fair LockMulti's release records its Locker's next wait: the
// client's next Lock then waits for its wake-up without an attempt, unless
// the list was empty. An acquisition that waits is thus two round trips:
// the release that hands on and the woken attempt. Each client has its own
// connection and pub/sub connection, read by a goroutine of its own.
func newFIFO(b *testing.B, addr string, keys []string, ttl time.Duration) scen.Mutex {
	c := newClient(b, addr)
	n := len(keys)
	acqKeys := make([]string, 0, 2*n+1)
	acqKeys = append(acqKeys, keys...)
	for _, k := range keys {
		acqKeys = append(acqKeys, k+":fence")
	}
	queue := keys[0] + ":fifo"
	acqKeys = append(acqKeys, queue)
	relKeys := append(append([]string(nil), keys...), queue)
	prefix := queue + ":"
	id := rand.Text()

	ps := c.Subscribe(context.Background(), prefix+id)
	b.Cleanup(func() { _ = ps.Close() })
	if _, err := ps.Receive(b.Context()); err != nil {
		b.Fatalf("fifo: subscribe: %v", err)
	}
	wake := make(chan struct{}, 1)
	go func() {
		for {
			if _, err := ps.ReceiveMessage(context.Background()); err != nil {
				return // closed by the cleanup
			}
			select {
			case wake <- struct{}{}:
			default:
			}
		}
	}()
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	queued := false // the last release queued this client behind others
	ttlMS := ttl.Milliseconds()
	return scen.Func(func(ctx context.Context) (func(context.Context) error, error) {
		owner := rand.Text()
		evict := "0"
		wait := queued
		for {
			if wait {
				timer.Reset(fifoEvictAfter)
				select {
				case <-wake:
					evict = "0"
				case <-timer.C:
					evict = "1"
				case <-ctx.Done():
					timer.Stop()
					return nil, ctx.Err()
				}
				timer.Stop()
			}
			took, err := fifoAcquire.Run(ctx, c, acqKeys, owner, ttlMS, id, evict).Slice()
			if err != nil {
				return nil, err
			}
			if len(took) == n {
				return func(ctx context.Context) error {
					r, err := fifoRelease.Run(ctx, c, relKeys, owner, id, prefix).Int64()
					if err != nil {
						return err
					}
					if r < 0 {
						return errors.New("fifo: release: not held")
					}
					queued = r == 0
					return nil
				}, nil
			}
			wait = true
		}
	})
}

// fifoAcquire is the "fifo" reference's attempt: for n keys,
// KEYS[1..n] the locks, KEYS[n+i] lock i's token counter and KEYS[2n+1]
// the queue; ARGV owner, ttl (ms), the client's id, and "1" to drop the
// clients queued before the caller when the keys are free (none of them
// took them within fifoEvictAfter). It returns the tokens, or an empty list
// when it queued the caller (or found it queued).
var fifoAcquire = goredis.NewScript(`local n = (#KEYS - 1) / 2
local q = KEYS[#KEYS]
local head = redis.call('LINDEX', q, 0)
if head and head ~= ARGV[3] and ARGV[4] == '1' and redis.call('EXISTS', unpack(KEYS, 1, n)) == 0 then
  local at = redis.call('LPOS', q, ARGV[3])
  if at then
    redis.call('LTRIM', q, at, -1)
    head = ARGV[3]
  end
end
if (head and head ~= ARGV[3]) or redis.call('EXISTS', unpack(KEYS, 1, n)) > 0 then
  if head ~= ARGV[3] and not redis.call('LPOS', q, ARGV[3]) then
    redis.call('RPUSH', q, ARGV[3])
  end
  return {}
end
if head then redis.call('LPOP', q) end
` + fencedTake)

// fifoRelease is the "fifo" reference's release: KEYS[1..n] the
// locks and KEYS[n+1] the queue; ARGV owner, the client's id and the
// channel prefix. When every lock is owner's it deletes them, wakes the
// first queued client and queues the caller: 1 when it is first then, 0
// when it waits behind others; -1 when a lock is not owner's.
var fifoRelease = goredis.NewScript(`local n = #KEYS - 1
local q = KEYS[#KEYS]
local vs = redis.call('MGET', unpack(KEYS, 1, n))
for i = 1, n do
  if vs[i] ~= ARGV[1] then return -1 end
end
redis.call('DEL', unpack(KEYS, 1, n))
local head = redis.call('LINDEX', q, 0)
if head then redis.call('PUBLISH', ARGV[3] .. head, '1') end
redis.call('RPUSH', q, ARGV[2])
if head then return 0 end
return 1`)
