package main

import (
	"slices"
	"strings"
)

// allowance lets conformance cases skip in some harnesses, for a documented
// property of the backend (or of the deployment the harness tests), with a
// skip message that contains message. The case "" is the harness itself,
// skipped as a whole.
type allowance struct {
	harnesses []string // package (without the module prefix) and test path
	cases     []string
	message   string
	reason    string
}

func (a *allowance) allows(harness, caseName, msg string) bool {
	return slices.Contains(a.harnesses, harness) && slices.Contains(a.cases, caseName) &&
		a.message != "" && strings.Contains(msg, a.message)
}

// allowances is the one list of the conformance skips that are not for want
// of a hook. Every other skip fails make test under CI=true.
func allowances() []allowance {
	// The Redis harnesses of one server (or of a Cluster, one node per
	// key), without Config.Replicas.
	redisSingle := []string{
		"integration/redis TestConformance",
		"integration/redis TestConformanceUnfair",
		"integration/redis TestConformanceNoPubSub",
		"integration/redis TestConformanceNoPubSubForced",
		"integration/redis TestConformanceCluster",
		"integration/redis TestConformanceOpen",
		"integration/redis TestConformanceOwnClient",
	}
	// The Redis harnesses of a Sentinel deployment (with Config.Replicas).
	redisSentinel := []string{
		"integration/redis/sentinel TestConformanceSentinel",
		"integration/redis/sentinel TestConformanceSentinelOwnClient",
	}
	// The harnesses of the other backends: one server, or a cluster the
	// client reaches as one.
	oneServer := []string{
		"integration/zookeeper TestConformance",
		"integration/mysql TestConformance",
		"integration/mysql TestConformancePollOnly",
		"integration/etcd TestConformance/embedded",
		"integration/etcd TestConformance/env",
		"integration/postgres TestConformance",
		"integration/postgres TestConformanceSQLDB",
		"integration/postgres TestConformancePgBouncer",
	}
	return []allowance{
		{
			harnesses: []string{
				"integration/redis TestConformanceCluster",
				"integration/redis/redlock TestConformanceRedlock3",
				"integration/redis/redlock TestConformanceRedlock5",
			},
			cases:   []string{"MultiTryAtomic"},
			message: "Harness.MultiAtomic is false",
			reason: "these take a multi-key lock's keys one by one (locker.LockMulti's ordered path): " +
				"a Cluster's keys lie in different hash slots unless they share one, and Redlock's masters are independent; " +
				"memory, Redis (single, Sentinel), etcd, ZooKeeper, MySQL and PostgreSQL run the case",
		},
		{
			harnesses: []string{
				"integration/redis/redlock TestConformanceRedlock3",
				"integration/redis/redlock TestConformanceRedlock5",
			},
			cases: []string{"SemaphoreLimit", "SemaphoreCrash", "RWExclusion", "RWWriterFirst",
				"SharedFencing", "SharedCancellation", "SharedLossIsolate", "SharedLateDelivery", "SemaphoreSetLimit",
				"ForceUnlockShared", "SetLimitWaiters", "SetLimitForgotten", "SharedKeyFreed", "FirstHolder", "SemaphorePool"},
			message: "has no shared holds",
			reason: "Redlock has no shared holds: a count of permits kept on a quorum of independent masters " +
				"is not one count (issue 30 lets Redlock refuse); the other Redis harnesses run these cases",
		},
		{
			harnesses: redisSingle,
			cases:     []string{"Failover"},
			message:   "Harness.Failover is nil",
			reason: "without Config.Replicas a failover may hand a held key out again (redis package doc, " +
				"Replicated before granted), and Cluster clients refuse Replicas; " +
				"TestConformanceSentinel and TestConformanceRedlock* run Failover",
		},
		{
			harnesses: oneServer,
			cases:     []string{"Failover"},
			message:   "Harness.Failover is nil",
			reason: "the harness's store is one server with no replica to fail over to; ZooKeeper and etcd " +
				"replicate by quorum, and a MySQL failover that loses committed writes loses locks " +
				"(mysql package doc, Limits)",
		},
		{
			harnesses: redisSentinel,
			cases:     []string{"FencingAfterRestart", "LockRidesOutRestart"},
			message:   "Harness.Restart is nil",
			reason: "a Sentinel deployment's data nodes down for longer than the sentinels' down-after " +
				"(one second) fail over instead of restarting, which the Failover case covers; " +
				"the other Redis harnesses run the restart cases",
		},
		{
			harnesses: []string{"integration/etcd TestConformance/env"},
			cases:     []string{"FencingAfterRestart", "LockRidesOutRestart"},
			message:   "Harness.Restart is nil",
			reason: "LOCKER_ETCD_ENDPOINTS names a cluster this test does not own and must not restart; " +
				"TestConformance/embedded runs the restart cases on a server of its own",
		},
		{
			harnesses: []string{"integration/etcd TestConformance/env"},
			cases:     []string{""},
			message:   "is not set: no external etcd",
			reason:    "without LOCKER_ETCD_ENDPOINTS there is no external cluster; TestConformance/embedded runs the suite",
		},
		{
			harnesses: slices.Concat([]string{
				"integration/redis/redlock TestConformanceRedlock3",
				"integration/redis/redlock TestConformanceRedlock5",
			}, redisSentinel),
			cases:   []string{""},
			message: "needs a server binary, which LOCKER_TESTENV=docker excludes",
			reason: "Redlock masters and a Sentinel deployment come from redis-server binaries only; " +
				"the run with binaries (make test) runs these harnesses",
		},
		{
			harnesses: []string{
				"integration/redis/redlock TestConformanceRedlock3",
				"integration/redis/redlock TestConformanceRedlock5",
			},
			cases:   []string{"ForceUnlock"},
			message: "the redlock backend cannot free a key it does not hold",
			reason:  "Redlock has no forced unlock: ForceUnlock answers errors.ErrUnsupported",
		},
		{
			harnesses: slices.Concat(redisSingle, oneServer, redisSentinel),
			cases:     []string{"RefusedStraggler"},
			message:   "Harness.Slow is nil",
			reason: "one server (or one primary, or one Cluster node per key, or a consensus leader the client follows) " +
				"settles each acquisition, so a refusal never leaves a request running on another node; " +
				"Redlock settles on a quorum of independent masters, and TestConformanceRedlock* run the case",
		},
		{
			harnesses: []string{"integration/zookeeper TestConformance"},
			cases:     []string{"LockTTL", "MaxHoldBesideHeld"},
			message:   "the backend refuses TTL",
			reason:    "a ZooKeeper lock lives as long as its session, whose timeout is the connection's: a per-lock TTL is refused",
		},
		{
			harnesses: []string{"integration/zookeeper TestConformance"},
			cases:     []string{"Data"},
			message:   "the Lock cannot change a held lock's data",
			reason: "the harness's connection has no credentials, whose default ACL makes lock nodes READ-only, " +
				"the holder's own included: SetData answers errors.ErrUnsupported (after the case's WithData part ran); " +
				"TestSetDataNeedsWrite runs SetData with Config.Digest",
		},
		{
			harnesses: []string{"integration/etcd TestConformance/embedded", "integration/etcd TestConformance/env"},
			cases:     []string{"RenewalBesideBusyCaller", "TryBesideBusyCaller", "LateGrant"},
			message:   "Harness.Busy is nil",
			reason: "an etcd client sends every request, the caller's and the lease keep-alives, as streams of one gRPC " +
				"connection (HTTP/2 multiplexing): the caller's slow requests or watches take no connection a renewal " +
				"or an acquisition would wait for, and there is no pool to fill",
		},
		{
			harnesses: []string{"integration/zookeeper TestConformance"},
			cases:     []string{"RenewalBesideBusyCaller", "TryBesideBusyCaller", "LateGrant"},
			message:   "Harness.Busy is nil",
			reason: "a ZooKeeper session is one connection whose requests are pipelined, and ZooKeeper has no blocking " +
				"request (a watch waits without holding the connection): the caller's work on the Locker's *zk.Conn " +
				"cannot hold it, and the session's heartbeats, which keep the locks, and the Locker's requests go out beside it",
		},
		{
			harnesses: []string{"integration/redis TestConformanceOpen"},
			cases:     []string{"RenewalBesideBusyCaller", "TryBesideBusyCaller", "LateGrant"},
			message:   "Harness.Busy is nil",
			reason:    "redis.Open makes a client the Locker owns: its caller shares no client or pool with it to fill",
		},
		{
			harnesses: []string{"integration/etcd TestConformance/embedded", "integration/etcd TestConformance/env"},
			cases:     []string{"LockTTL", "MaxHoldBesideHeld"},
			message:   "the backend refuses TTL",
			reason:    "an etcd Locker keeps all its locks on one lease, of the Locker's TTL: a per-lock TTL is refused",
		},
	}
}
