package redis

import (
	goredis "github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
	"github.com/redis/go-redis/v9/push"
)

// renewalClient returns a client of the Locker's own for its renewals, made
// from client's options with one connection per server, and the function
// that closes it; nil when client is none it can copy (an owned client,
// whose caller has no access to it, a Ring, a wrapper): renewals then use
// client. On the caller's client, a renewal waited for a connection behind
// the caller's own commands: with its pool and its pipeline pool held by
// blocking commands, renewals waited out PoolTimeout and every lock was
// lost while the server answered at once. The copy keeps what the options
// carry for a connection (address or Sentinel dialling, credentials, TLS,
// OnConnect, timeouts, lifetimes, the protocol), but not the hooks added
// to client with AddHook (see ownOptions). A broken connection, or one to
// a primary that became a replica (READONLY), is replaced by go-redis's
// retry within the call.
func renewalClient(client Master) (Master, func() error) {
	switch c := client.(type) {
	case *goredis.Client:
		o := ownOptions(c)
		o.PoolSize, o.MaxIdleConns, o.MaxActiveConns = 1, 1, 1
		o.PipelinePoolSize = -1 // pipelines on the one connection
		rc := goredis.NewClient(&o)
		return rc, rc.Close
	case *goredis.ClusterClient:
		o := *c.Options()
		dropState(&o.PushNotificationProcessor, &o.MaintNotificationsConfig, &o.MinIdleConns)
		o.PoolSize, o.MaxIdleConns, o.MaxActiveConns = 1, 1, 1
		o.PipelinePoolSize = -1
		rc := goredis.NewClusterClient(&o)
		return rc, rc.Close
	}
	return nil, nil
}

// ownOptions returns the options of a client of the Locker's own made
// from c, the caller's client: for its renewals (renewalClient), or for
// all its calls (Config.OwnClient). They keep what c's options carry for
// a connection, but not the state that NewClient keeps in them (see
// dropState) nor a client-side cache, which the Locker does not need.
func ownOptions(c *goredis.Client) goredis.Options {
	o := *c.Options()
	dropState(&o.PushNotificationProcessor, &o.MaintNotificationsConfig, &o.MinIdleConns)
	o.ClientSideCacheConfig, o.ClientSideCache = nil, nil
	return o
}

// dropState clears the fields of a copy of the caller's client options
// (goredis.Options, goredis.ClusterOptions) that a client of the Locker's
// own must not share. NewClient and NewClusterClient register handlers in
// the push processor: a second registration fails, and panics with
// maintenance notifications enabled. The Locker needs neither. Idle
// connections are dialled when a call needs one, not ahead: New does not
// contact Redis.
func dropState(processor *push.NotificationProcessor, maint **maintnotifications.Config, minIdleConns *int) {
	*processor = nil
	*maint = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
	*minIdleConns = 0
}
