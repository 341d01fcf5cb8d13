// Package redis is the Redis backend of locker: locks in a Redis server
// (single node, Sentinel-managed primary or Cluster) through the caller's own
// go-redis v9 client. [NewRedlock] runs Redlock over independent masters.
//
// The Locker never closes the client. It dials connections of its own only
// with the client's options: for renewals, and for every call with
// [Config.OwnClient]. The client's options (timeouts, retries, TLS, pool)
// stay the caller's. The reasons
// behind this design are in the repository's docs/design.md.
//
// # Guarantees
//
//   - Mutual exclusion as long as the Redis primary keeps its data. Renewals
//     and releases compare the owner and never touch another owner's lock. A
//     renewal that finds the key gone or another owner's marks the lock lost
//     at once.
//   - Expiry runs on the server's clock. Lock.Done closes before the server
//     can give the key to anyone else. A lock handed over to a waiter counts
//     from when that waiter's last attempt was sent.
//   - Fencing tokens strictly increase per key: max(last token + 1, server
//     time in µs). They keep increasing across a restart that lost the data,
//     as long as the server clock did not step back. Keep servers on NTP.
//   - Waiters of a key are served in arrival order, from a queue in Redis.
//     Unlock hands the key to the first live waiter and wakes only that
//     waiter's Locker. TryLock never queues, and a free key with live waiters
//     goes to the first of them.
//   - A Lock that gives up leaves the queue before it returns, and passes on
//     a key handed to it meanwhile.
//   - All locks of a Locker due in a renewal tick are renewed in one pipeline
//     (one per node on a Cluster).
//   - A Locker runs two goroutines (pub/sub receiver and writer) once one of
//     its Locks waited. Close stops them, waits for them and closes the
//     pub/sub connection, leaving no subscription. A channel stays subscribed
//     for 2 s after its last waiter left.
//   - A fair Locker on one server (not a Cluster, without Config.Replicas)
//     also reads its inbox, the list locker:inbox:<its id>, with BLPOP on one
//     connection of the client's pool while its Locks wait, and for 2 s
//     after. A hand-over to one of its waiters is pushed there, and the
//     waiter takes it without another round trip. The list expires a minute
//     after its last grant. A user whose ACL refuses the list, and a Locker
//     with [Config.NoInbox], keep the confirming round trip.
//
// # Fair and unfair
//
// Locks are fair by default. [Config.Unfair] makes them barging: a release
// frees the key and wakes the first waiter. Whoever asks first gets the key,
// so a waiter may be overtaken. A first waiter that has waited a millisecond
// or longer, and is not trying by itself at the time (woken within the last
// millisecond, or polling a key that keeps changing hands), is handed the
// key by the next release instead, as in fair mode. Such hand-overs come at
// most once per 10 ms per key, so that a hot key keeps barging.
//
// # Waiting without pub/sub
//
// Where the server refuses PUBLISH or SUBSCRIBE, the Locker switches to
// polling at the first refusal and logs it once at INFO. [Config.NoPubSub]
// starts it that way. Waiting Locks then poll with the Locker's backoff. Each
// pause is bounded by the holder's remaining time, the caller's ctx and 200
// ms. The queue keeps the order. Its releases still publish, so that the
// waiters of Lockers with pub/sub on the same keys are woken. A refused
// PUBLISH never fails a script: the hand-over it follows is written and
// reported as done.
//
// # Replicated before granted (Sentinel)
//
// With [Config.Replicas] n, an acquisition counts only once WAIT n confirms n
// replicas have it, within [Config.ReplicaTimeout]. Otherwise it is undone
// and reported as a store error: TryLock returns it, a waiting Lock queues
// again. WAIT is not consensus: a replica that acknowledged and is not
// promoted still loses the lock. With one replica per primary, or n equal to
// all replicas, a Sentinel failover keeps every granted lock. New refuses
// Replicas with a Cluster client.
//
// The other writes that a caller counts on wait for the replicas too:
//
//   - A renewal (and so locker.Extend) counts only once WAIT confirms it.
//     Otherwise the lock keeps the validity of its last confirmed
//     renewal, and is lost when that runs out.
//   - locker.SetData, locker.SetLimit, the keep of a MinHold at Unlock and
//     locker.ForceUnlock return nil only once WAIT confirms them.
//     Otherwise their error says the write did not reach the replicas. The
//     write stays on the primary: it may or may not survive a failover.
//   - A release (Unlock) and a waiter leaving the queue do not wait. A
//     lock or a waiter that a failover brings back expires as a crashed
//     holder's or waiter's would. A waiter handed the key confirms it with
//     WAIT, as any acquisition does.
//
// Keep ReplicaTimeout below the client's ReadTimeout: WAIT answers only
// when its time is up or the replicas confirmed. A WAIT cut off by
// ReadTimeout fails the write's call with a network error.
//
// # Semaphores and read-write locks
//
// The Locker implements locker.SharedLocker (locker.NewSemaphore,
// locker.NewRWMutex) on every client but Redlock's.
//
//   - Each permit or read or write hold is a lease of its own. It is renewed
//     in the same pipeline as the Locker's locks, and expires on the server's
//     clock.
//   - One script per attempt drops expired holders and waiters, checks the
//     key's kind and limit, and grants only holds that fit.
//   - A waiting request lines up in Redis. Later requests are not granted
//     ahead of it: a waiting writer blocks later readers, a waiting heavy
//     request later light ones.
//   - Tokens come from the key's fence: a hold's token is greater than every
//     earlier token of the key, a plain lock's included.
//   - A release, an expiry or a withdrawal that moves the line wakes the
//     Locker of the first waiter through pub/sub (and of the read waiters
//     right behind a read waiter). Each grant from the line wakes the next.
//     Without pub/sub the waiters poll with the Locker's backoff.
//   - A key is a plain lock, a semaphore of one limit, or a read-write lock
//     until its last holder and waiter are gone. Other requests fail with an
//     error matching locker.ErrInvalidOption that names both uses.
//   - With Config.Replicas, a grant counts once WAIT confirms it, as for a
//     lock. Otherwise it is undone and reported as a store error.
//
// # Several keys at once
//
// locker.TryLockMulti, and each attempt of a waiting locker.LockMulti, take
// every key in one script or none, each key with its own token from its
// fence. A key with waiters counts as held, unless the Locker is unfair.
// With Config.Replicas the keys count once WAIT confirms them. The keys are
// taken one by one instead (locker.LockMulti's ordered path) on a Ring, for
// more than 256 keys, and on a Cluster when they are in different hash
// slots: each key carries a hash tag of its own, so keys of several store
// keys share a slot only by chance. The Redlock Locker always takes them
// one by one.
//
// A waiting locker.LockMulti holds nothing between attempts. An attempt
// that finds a key held records the Locker in that key's waiters hash. The
// release that frees the key wakes the first Locker recorded, on its
// channel, and forgets it. Without pub/sub the wait polls. A MultiLock's
// Unlock releases its keys in one script when they fit in one, and hands
// over the keys with waiters in a pipeline of release scripts.
//
// # Limits
//
//   - Replication is asynchronous: a failover before a lock reached the
//     replica can grant the key again, unless Config.Replicas is set. Use
//     etcd or ZooKeeper where a failover must never break exclusion, and
//     fencing tokens in any case.
//   - Run Redis with maxmemory-policy noeviction, or no maxmemory. A new
//     Locker checks with CONFIG GET in the background and warns when lock
//     keys can be evicted.
//   - A waiter makes an attempt at least every TTL/3; one that made none for
//     a TTL counts as gone. A waiter that crashed while queued can be handed
//     the key before that; it holds the key for a claim of at most 500 ms
//     (less with a shorter TTL).
//   - A fence key stays [FenceRetention] after the last acquisition of its
//     key; queue keys vanish once no waiter refreshes them.
//   - Keys are at most [MaxKeyBytes] bytes, prefix included.
//   - A lock's data (locker.WithData) follows its label in the lock
//     value, after a NUL byte. SetData is one script, which keeps the
//     lock's time to live. Without Config.Replicas, a failover may bring
//     back the older data. Redlock changes it on every master and succeeds
//     on a quorum.
//   - Redis 5.0 or later. Pipelines and EVAL/EVALSHA must be allowed;
//     WATCH/MULTI/EXEC are never used.
//   - Through a proxy that shards by key, hash on "{}" tags. WAIT, CONFIG GET
//     and TIME fail there: no Config.Replicas, no eviction check, no Inspect.
//   - locker.List scans with SCAN, which may yield a key twice when Redis
//     resizes its table meanwhile; keys come in no order. On a Cluster it
//     scans every primary. The Redlock Locker scans the first
//     len(masters)-quorum+1 masters and reads each key on every master;
//     its listing fails while one of the scanned masters is unreachable.
//
// # Keys
//
// For a key k (prefix included) the lock is "locker:{k}", beside
// "locker:{k}:fence", ":q", ":w" and the channel ":rel". Shared holds use
// ":sh", ":sq" and ":sw" besides the fence; versions before the holds hash
// also used ":sm". All share one hash
// tag, so every script touches one Cluster slot. A key containing '}' is
// tagged with a hash of it: "locker:#{<hex>}:lock:k". [KeysOf] returns the
// names; [ACLRules] the ACL selectors of a prefix.
//
// # Errors
//
// A Lock or TryLock error other than locker.ErrNotAcquired may have taken the
// key in one case only: the acquire script was written but its reply never
// came. An error reply, a closed client, a failed dial and an exhausted pool
// prove that it did not run. In the doubtful case the Locker runs the release
// for that attempt with a fresh context (bounded by the TTL and 2 s). When
// that fails too, it retries in the background (every TTL/10 at most, 1 s at
// the least) until Redis answers, and a last time on Close. A waiting Lock's
// queue entry is cleaned up the same way.
//
// A waiting Lock rides out store errors with the Locker's backoff, kept
// between 10 ms and 2 s, until its ctx ends. The error then matches
// locker.ErrNotAcquired and ctx.Err() and wraps the last store error. A
// closed client and refusals no retry can cure (NOAUTH, WRONGPASS, NOPERM,
// unknown commands) return at once.
//
// go-redis retries commands after some network errors (Options.MaxRetries). A
// retried acquire returns the lock it took, never "held". A retried release
// whose first run succeeded reports locker.ErrNotHeld; the key is released
// all the same. Other Unlock errors leave the outcome unknown; the key then
// expires within its TTL.
//
// # Client settings
//
// Set Options.ContextTimeoutEnabled, so that the ctx of Lock, Unlock and the
// renewals bounds each call. Without it a store cut off from the network
// holds Unlock and Close for ReadTimeout and WriteTimeout, times the retries.
// Keep ReadTimeout below TTL/3, so that a renewal stuck on a dead connection
// fails before the lock's deadline. go-redis ignores a cancelled ctx until
// the command's reply or ReadTimeout: a call with a ctx that never ends
// (context.Background()) runs its commands in the caller's goroutine, and
// returns after Close only when its command does. On a client of yours, a
// call whose ctx can end runs in another goroutine, which it leaves when
// the ctx ends. With [Config.OwnClient], the Locker makes a client of its
// own from your *goredis.Client's options, and runs every call as a
// Locker from [Open] does (see URLs). Your hooks then see none of its
// commands.
//
// # URLs
//
// [Open] (redis://, rediss://), [OpenCluster] (several hosts), [OpenSentinel]
// (master_name=) and [OpenRedlock] (redlock://, redlocks://) open a Locker
// that owns its client, with ContextTimeoutEnabled set. Each opener's doc
// lists its parameters.
//
// A Locker from [Open] runs every call in its caller's goroutine. A call
// whose ctx can end takes a connection of its own, which the Locker closes
// when the ctx ends: the call then returns at once. A call whose ctx never
// ends runs on a second pool, which Close closes first: it returns at once
// too. Redis may still run a request it had read. An attempt cut so leaves
// a tombstone (locker:{key}:cut:<owner>, or locker:{key}:cut:<Locker id>
// for an attempt that Close cut, for the TTL; a record " cut" of the
// key's holds hash for a shared hold's attempt), and a request that runs
// after it takes nothing. A call whose ctx can end holds a connection of
// its own while it runs, beside the client's pools; up to 16 stay open
// between calls.
package redis
