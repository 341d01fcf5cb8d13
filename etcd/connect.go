package etcd

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
)

// DefaultDialTimeout bounds how long [New] and [NewContext] wait for a
// connection to etcd, and is the default dial_timeout of [Open].
const DefaultDialTimeout = 5 * time.Second

// errNoAnswer is the cause when no connection came up and gRPC gave no
// error: a server (or a firewall) that accepts TCP and never answers.
var errNoAnswer = errors.New("no answer from the server: the connection is still being set up")

// notConnected returns the cause of ctx's end when awaitConnection ended
// it (no connection came up within the dial timeout), else err.
func (d *etcdDriver) notConnected(ctx context.Context, err error) error {
	if cause := context.Cause(ctx); errors.Is(cause, errNotConnected) {
		return cause
	}
	return err
}

// errNotConnected marks the errors of awaitConnection.
var errNotConnected = errors.New("no connection")

// awaitConnection waits, for at most timeout and until ctx ends, until
// client's connection to etcd is up. It fails naming the endpoints and the
// last connection error: without it, the first request waits for its own
// ctx and reports only that ctx's error.
func awaitConnection(ctx context.Context, client *clientv3.Client, timeout time.Duration) error {
	conn := client.ActiveConnection()
	if conn == nil {
		return nil
	}
	tctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	conn.Connect()
	var last error
	for {
		state := conn.GetState()
		switch state {
		case connectivity.Ready, connectivity.Shutdown:
			return nil // a closed client fails the grant with its own error
		case connectivity.TransientFailure:
			if err := connectionError(tctx, conn); err != nil {
				last = err
			}
		}
		if !conn.WaitForStateChange(tctx, state) {
			break
		}
	}
	if ctx.Err() != nil {
		return nil // the grant reports its own ctx's end
	}
	if last == nil {
		last = errNoAnswer
	}
	return fmt.Errorf("etcd %s: %w within the dial timeout of %v: %w", strings.Join(client.Endpoints(), ","), errNotConnected, timeout, last)
}

// connectionError returns the error of conn's last connection attempt: a
// request that does not wait for a connection fails with it at once.
func connectionError(ctx context.Context, conn *grpc.ClientConn) error {
	return conn.Invoke(ctx, "/etcdserverpb.Maintenance/Status", &pb.StatusRequest{}, &pb.StatusResponse{}, grpc.WaitForReady(false))
}
