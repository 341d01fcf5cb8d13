// Package redis is the Redis backend of locker: distributed locks in a Redis
// server (single node, Sentinel-managed primary or Cluster) reached through
// the caller's own go-redis v9 client.
//
//	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379", ContextTimeoutEnabled: true})
//	lk, err := lockredis.New(rdb, locker.WithTTL(10*time.Second))
//	...
//	err = locker.TryDo(ctx, lk, "report:2024-06", func(ctx context.Context) error {
//		return generateReport(ctx) // ctx ends if the lock is lost
//	})
//
// (Here go-redis is imported as redis and this package as lockredis.) The
// Locker never closes the client and never dials on its own: every command
// goes through the client, whose options (timeouts, retries, TLS, pool) stay
// the caller's.
//
// # How it works
//
// A lock is a string key set with PX (its TTL runs on the server's clock)
// holding "<owner> <token> <label>": a random owner per acquisition, the
// fencing token and the Locker's label (locker.WithOwnerLabel), so that
// redis-cli GET shows who holds a key. Three Lua scripts (acquire.lua,
// release.lua, renew.lua, embedded, run with EVALSHA and falling back to
// EVAL when the server lost its script cache) do all the work, each in one
// round trip:
//
//   - acquire: takes a free key and draws its token; TryLock on a held key
//     costs one script call that reads the key and returns.
//   - release: compare-and-delete, or, when Locks are waiting, hands the key
//     over to the first of them (below).
//   - renew: compare-and-PEXPIRE. All locks of a Locker due in a renewal
//     tick are renewed in one pipeline: one round trip per tick whatever
//     their number (one per node, in parallel, on a Cluster). A renewal that
//     finds the key gone or another owner's marks the lock lost at once.
//
// # Waiting
//
// A waiting Lock queues in Redis, in arrival order (a sorted set next to the
// lock). Unlock hands the key over to the first live waiter in the same
// script (with a new fencing token and that waiter's TTL) and publishes
// "grant <owner> …" on the key's channel; that waiter's Lock returns without
// another round trip, and nobody else wakes: no herd, no busy polling, and
// waiters are served first come, first served. Each Locker has one pub/sub
// connection, opened when one of its Locks first has to wait and shared by
// all of them, with one subscription per key it waits for.
//
// A waiter also makes an attempt every TTL/3 (which keeps its place in the
// queue alive) or when the holder's remaining TTL runs out, whichever comes
// first: a crashed holder never releases, and a message can be lost while a
// connection is down. A waiter that made no attempt for TTL counts as gone
// and is dropped from the queue. A Lock that gives up (its ctx ends, the
// Locker closes, Redis fails) leaves the queue before returning, and passes
// the key on if it was handed over to it meanwhile.
//
// TryLock never queues, but does not jump the queue either: a free key with
// live waiters goes to the first of them.
//
// A hand-over is announced on a channel of the waiter's Locker only (the
// key's channel, then ":" and the Locker's id), and the claim it starts to
// the next waiter's Locker: two messages of one subscriber each, with 4
// waiters or 64. With one channel per key, every waiting Locker received
// every hand-over, and 64 waiters got a third of the hand-offs per second
// of 4.
//
// # Fair and unfair
//
// The default is fair: first come, first served, every Locker served in
// turn. [Config.Unfair] (URL unfair=true) trades order for throughput on a
// hot key, as Redisson's RLock beside its RFairLock: a release frees the
// key and wakes the first waiter's Locker with one message, and the key
// goes to whoever asks first, that waiter or a Locker just asking (often
// the one that released it, looping). No wake-up sits on the critical path
// of a busy key, but a waiter can be overtaken again and again; it still
// gets the key at its next attempt once nobody else asks. A waiter woken in
// vain is not woken again for a millisecond (it tries again by itself
// then), so that a key changing hands many times per millisecond costs it
// about one attempt per millisecond, not one per hand-off.
//
// Measured on one key (integration/redis BenchmarkScenarios: clients each
// with a Locker of their own, Lock → read-modify-write → Unlock, all
// implementations in one run on a shared 2-core VM under load 1.5–3.5), at
// 4 / 16 / 64 clients, hand-offs per second against bsm/redislock (retrying
// every millisecond):
//
//   - fair: 0.56× / 0.71× / 2.4× (4,064 / 3,696 / 3,186), every client
//     within 0.98 of the others' count, wait p99 2–40 ms; 64 clients 0.78×
//     the 4-client figure;
//   - unfair: 0.74× / 1.01× / 3.5× (5,310 / 5,250 / 4,665), per-client
//     counts within 0.24–0.94 of each other, wait p99 8–162 ms; 64 clients
//     0.88× the 4-client figure. The wake gap raised it by about a quarter
//     (alternating runs of both builds, 4 clients: medians 3,608 and 4,595).
//
// Both cost the same Redis work per hand-off at 4 and at 64 clients (fair:
// 3.0 script calls, 2.0 messages, 26 commands; unfair: 2.4, 0.4 and 21):
// nothing scans the queue or wakes more than one Locker. What still falls
// at 64 clients (0.6–0.9× across runs, with the machine's load) is on the
// clients' side: 64 Lockers, each with two connections, take turns on two
// shared cores; the client process's CPU time per hand-off was 15–25%
// higher than with 4 in some runs, the same in others (the scenarios
// report it: locker-client-cpu-µs). Fair
// stays the default: its order and bounded waits are what a lock owes every
// caller, and its cost is one confirmation round trip per hand-off (the
// waiter named by a hand-over confirms it in Redis, so that a forged
// message grants nothing), which keeps it below a barging lock at few
// clients. Choose Unfair for a hot key whose throughput matters more than
// who gets it next.
//
// # Waiting without pub/sub
//
// Where the server refuses pub/sub (ACL -@pubsub or resetchannels,
// rename-command, a proxy), the Locker switches at the first refusal (a
// SUBSCRIBE, or a script's PUBLISH) and logs it once at INFO; Config.NoPubSub
// (URL parameter nopubsub=true) starts it that way. Scripts then publish
// nothing (a refused PUBLISH never fails a script: the hand-over it follows
// is written and reported as done), and waiting Locks poll with the Locker's
// backoff (locker.WithBackoff) with jitter, each pause bounded by the
// holder's remaining time and the caller's ctx, and kept under 200 ms so
// that a waiter confirms a hand-over to it within its 500 ms claim. The
// queue keeps the order. Measured hand-off (Unlock to the waiting Lock's
// return, default TTL and backoff): p50 3.4–3.45 ms, p90 4.5–4.6 ms, where each
// Unlock used to fail and the waiter retried only every TTL/3 (p50 4.0 s).
//
// # Replicated before granted (Sentinel)
//
// Redis replicates asynchronously: a lock written to the primary just
// before a failover may never reach the replica that takes over, and
// another Locker then gets the key while the first holder's Done is still
// open. Config.Replicas (URL parameter replicas=n) closes that window: an
// acquisition, and the confirmation of a hand-over, counts only once WAIT n
// (sent in the same pipeline, so on the same connection, bounded by
// Config.ReplicaTimeout) says n replicas have the write; otherwise it is
// undone and reported as a store error (TryLock returns it; a waiting Lock
// queues again). Measured on loopback (primary, one replica, three
// sentinels; 200 locks taken one after another, a graceful SENTINEL
// FAILOVER after the 50th, a second Locker trying every key all along;
// integration/redis TestSentinelFailover, two runs): without Replicas, 42
// and 43 of the 200 locks went to the second Locker while their holder's
// Done was open, for 47–542 ms; with Replicas 1, none, at the price of
// 49–53 refused attempts during the ~1.1 s failover and one WAIT per
// acquisition. WAIT is not
// consensus: a replica that acknowledged and then is not the one promoted
// (several replicas, a non-graceful failover picking a laggard) still
// loses the lock; with one replica per primary, or n = all replicas, a
// Sentinel failover keeps every granted lock. Cluster clients cannot
// promise WAIT the write's connection, and New refuses Replicas with them.
//
// OpenSentinel (or backends.Register with a master_name parameter) opens a
// Locker through go-redis's failover client:
// redis://:pass@s1:26379,s2:26379,s3:26379/0?master_name=mymaster&replicas=1,
// with sentinel_username and sentinel_password for the sentinels' own
// credentials.
//
// # Proxies
//
// Through a proxy that shards by key (twemproxy and the like): every name
// of a lock shares one hash tag ({…}), so configure the proxy to hash on
// "{}" tags and a lock's keys and scripts stay on one server. The Locker
// uses EVALSHA/EVAL (always with keys), pipelines and, where allowed,
// PUBLISH/SUBSCRIBE; it never uses WATCH/MULTI/EXEC. A proxy without
// pub/sub makes the Locker poll (see Waiting without pub/sub; set
// NoPubSub to skip the first refusal). Keyless commands fail through such
// proxies: WAIT (Config.Replicas cannot be used), CONFIG GET (the eviction
// check is skipped) and TIME (Inspect fails). go-redis v9 opens every
// connection with HELLO (even with Options.Protocol 2) and, unless
// Options.DisableIdentity is set, CLIENT SETINFO; a proxy that answers an
// unknown command with an error is fine (go-redis falls back to RESP2 and
// AUTH), but twemproxy closes the connection instead, and go-redis v9.23
// has no setting that skips HELLO (go-redis issue 2616). This package
// writes no protocol shim: put such a proxy behind one that answers HELLO
// with an error, or use go-redis's Cluster or failover clients directly.
//
// # Guarantees
//
//   - Mutual exclusion as long as the Redis primary keeps its data: a key is
//     set only when absent (or handed over by its holder's own release), and
//     renewals and releases compare the owner.
//   - Expiry runs on the server's clock (PX); the holder's own deadline
//     (Lock.Done) runs on its monotonic clock, from the moment it sent the
//     request that set or renewed the expiry, so Done closes before the
//     server can give the key to anyone else. A lock handed over to a waiter
//     counts from the moment the waiter's last attempt before the hand-over
//     was sent (the grant names it), which is earlier than the hand-over.
//   - Unlock and renewals never touch another owner's lock.
//   - Fencing tokens strictly increase per key (see Fencing).
//   - Waiters of a key are served in arrival order.
//   - Besides the engine's renewal goroutine, a Locker runs two goroutines
//     (the pub/sub receiver and writer) once one of its Locks has had to
//     wait; Close stops them, waits for them and closes the pub/sub
//     connection, leaving no subscription on the server. A channel stays
//     subscribed for 2 s after its last waiter left, so that a key contended
//     in bursts is not subscribed again for every wait.
//
// # Fencing
//
// A new token is max(last token + 1, server time in microseconds). The last
// token lives in a fence key next to the lock for [Config].FenceRetention after the
// last acquisition. Tokens therefore keep increasing across a restart of a
// Redis without persistence (or a failover that lost the fence key) as long
// as the server clock has not gone back by more than the time since the
// previous acquisition of the key (keep servers on NTP; two acquisitions of
// one key cannot happen within one microsecond, each script takes longer).
// Check the token in the store you protect, as the locker package doc shows.
//
// # Errors
//
// A Lock or TryLock that fails with an error other than locker.ErrNotAcquired
// may, in one case only, have taken the key: when the acquire script was
// written to the connection but its reply never came (the connection broke
// or timed out after the write, or ctx ended while the reply was awaited).
// Errors that prove the script did not run are: an error reply from Redis,
// a closed client, a failed dial, an exhausted connection pool. In the
// doubtful case the Locker runs the release script for the attempt's owner
// with a fresh context (bounded by the TTL and 2 s) before returning the
// error, so the key is not left to a phantom holder until its TTL; when that
// cleanup fails too, the Locker retries it in the background (every TTL/10
// at most, 1 s at the least) until Redis answers, and a last time on Close.
// A waiting Lock's queue entry is cleaned up the same way: a wait cancelled
// during an outage holds up nobody once Redis is back (measured: the key
// free for another Locker 5–11 ms after the holder's Unlock).
//
// A waiting Lock rides out store errors (refused or reset connections,
// timeouts, a restarting server) with the Locker's backoff, kept between
// 10 ms and 2 s, until its ctx ends; the error then matches
// locker.ErrNotAcquired and ctx.Err() and wraps the last store error. A
// closed client and refusals no retry can cure (NOAUTH, WRONGPASS, NOPERM,
// unknown commands) return at once.
//
// go-redis retries commands after some network errors (Options.MaxRetries).
// The acquire script is idempotent for one owner: a retry of an attempt
// that had run returns the lock it took, never "held". Release is not: a
// retried release whose first run had succeeded reports locker.ErrNotHeld
// (the lock is released all the same). Unlock errors other than ErrNotHeld
// leave the outcome unknown; the key then expires within its TTL.
//
// # Client settings
//
// Set Options.ContextTimeoutEnabled so that the ctx of Lock, Unlock and of
// the renewals bounds each call (without it, go-redis bounds calls by
// ReadTimeout and WriteTimeout only, and a store cut off from the network
// holds Unlock and Close for that long, times the retries). Keep ReadTimeout
// below TTL/3, so that a renewal stuck on a dead connection fails and is
// retried before the lock's deadline. Redis 5.0 or later (TIME inside a
// script that writes); tested with 7.0. Opened by URL (package backends),
// the client has ContextTimeoutEnabled set.
//
// Set maxmemory-policy to noeviction (or leave maxmemory at 0): with an
// evicting policy a lock key can vanish under memory pressure, and another
// Locker get the key before the holder's next renewal notices (measured
// elsewhere: 50–222 ms of overlap). A new Locker checks with CONFIG GET, in
// the background, and logs a warning when lock keys can be evicted. Pipelines
// and EVAL/EVALSHA must be allowed (proxies that refuse scripts will not do);
// PUBLISH/SUBSCRIBE are used where allowed (see Waiting without pub/sub).
//
// # Keys and Cluster
//
// For a key k (with the Locker's prefix) the lock is "locker:{k}", with
// "locker:{k}:fence", "locker:{k}:q", "locker:{k}:w" and the channel
// "locker:{k}:rel" beside it: one hash tag, so every script touches one
// Cluster slot, and keys spread over all slots. A key containing '}' (which
// would end the tag early) is tagged with a hash of it instead:
// "locker:#{<hex>}:lock:k". Keys are at most [MaxKeyBytes] bytes.
//
// Release messages use plain PUBLISH, which every Redis since 2.0 has and
// which a Cluster broadcasts to all its nodes, so one pub/sub connection to
// any node serves all keys; only releases that had waiters publish. With
// very many contended keys on a large Cluster, that broadcast is the cost to
// watch (sharded pub/sub would need one connection per node).
//
// # Limits
//
//   - Redis replication is asynchronous: when a primary fails over (Sentinel,
//     Cluster) before a lock reached its replica, the new primary does not
//     have it and can grant the key again, unless Config.Replicas made every
//     grant wait for the replicas (above). [New] does not implement
//     Redlock ([NewRedlock] does, with its own limits: see [RedlockConfig]).
//     Use etcd or ZooKeeper where a failover must never break exclusion,
//     and fencing tokens in any case.
//   - A waiter that vanishes while queued (a crashed process) can be handed
//     the key before it counts as gone; the hand-over is a claim of 500 ms
//     (less with a shorter TTL) that it never confirms, after which the
//     other waiters take the key (conformance case WaiterCrash: 0.53–0.55 s
//     at TTL 1.5 s; it used to be the waiter's whole TTL).
//   - A fence key stays [FenceRetention] after the last acquisition of its
//     key; queue keys vanish once no waiter refreshes them.
//   - Keys are at most [MaxKeyBytes] bytes, prefix included.
//
// # Performance
//
// Measured by the benchmarks of this package (make bench PKGS=./redis, or
// go test -run '^$' -bench . -benchtime 3000x with LOCKER_REDIS_ADDR set), on
// loopback against redis-server 7.0 on a shared 2-core
// VM, each in one run with the raw floor: a hand-written SET key v NX PX ttl
// plus an EVALSHA compare-and-delete on one go-redis client (README.md has
// the details):
//
//   - uncontended Lock+Unlock: 1.09–1.34× the floor, varying with the load
//     on the machine (about 15 µs more, mostly Lua time on the server);
//   - TryLock on a held key: 1.07–1.18× one EVALSHA round trip;
//   - hand-off (Unlock to the return of a waiting Lock): p50 0.26–0.40 ms
//     depending on the load (0.15–0.23 ms in the same runs before the
//     waiter confirmed each hand-over in Redis, which keeps a forged grant
//     message from granting anything);
//   - 16 Lockers on one key: 0.62–0.68× the floor's hand-offs per second
//     (0.93–1.01× before the confirmation), every Locker served, 3 Redis
//     script calls per hand-off against the floor's 16–18 commands (see
//     Fair and unfair for the comparison with bsm/redislock);
//   - server time per script call (INFO commandstats, a dedicated
//     redis-server 7.0, 3,000 calls each): acquire of a free key nobody
//     waits for 9–12 µs, its release 4.5–6 µs, against 1.1–1.5 µs for SET
//     NX PX and 2.9–3.0 µs for a compare-and-delete script. Neither does
//     any queue bookkeeping; the rest is Lua's own cost (about 2.4 µs per
//     call with the scripts' 13 arguments, 1 µs per command, 2–2.5 µs per
//     write): two writes (the lock, and the fence that keeps tokens
//     increasing across a clock step back) and TIME. An INCR-based fence
//     (INCR, PEXPIRE) measured no cheaper and would lose the token's
//     meaning as the acquisition time;
//   - 10,000 locks held by one Locker: 1.0–1.17 round trips per renewal
//     tick, 648–674 heap bytes per held lock.
package redis
