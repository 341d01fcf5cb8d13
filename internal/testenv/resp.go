package testenv

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"
)

// This file is a minimal RESP (Redis protocol) client, enough to check that a
// server answers and that a cluster is formed, without a dependency on a Redis
// client library.

// respDo sends one command to the Redis server at addr on a new connection and
// returns the reply (simple string, bulk string or integer) as a string. A
// Redis error reply is returned as an error.
func respDo(ctx context.Context, addr string, args ...string) (string, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	} else {
		_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	}
	if err := respWrite(conn, args...); err != nil {
		return "", err
	}
	return respRead(bufio.NewReader(conn))
}

// respWrite writes args as a RESP command array.
func respWrite(w io.Writer, args ...string) error {
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// respRead reads one reply that is not an array.
func respRead(r *bufio.Reader) (string, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	line = strings.TrimSuffix(line, "\r\n")
	if line == "" {
		return "", errors.New("resp: empty reply line")
	}
	switch line[0] {
	case '+', ':':
		return line[1:], nil
	case '-':
		return "", fmt.Errorf("redis: %s", line[1:])
	case '$':
		n, err := strconv.Atoi(line[1:])
		if err != nil {
			return "", fmt.Errorf("resp: bad bulk length %q", line)
		}
		if n < 0 {
			return "", nil
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return "", err
		}
		return string(buf[:n]), nil
	default:
		return "", fmt.Errorf("resp: unsupported reply %q", line)
	}
}

// redisPing checks that the server at addr answers PING with PONG.
func redisPing(ctx context.Context, addr string) error {
	got, err := respDo(ctx, addr, "PING")
	if err != nil {
		return err
	}
	if got != "PONG" {
		return fmt.Errorf("PING answered %q", got)
	}
	return nil
}

// clusterReady checks that the cluster node at addr reports a healthy cluster
// of n masters with every slot assigned.
func clusterReady(ctx context.Context, addr string, n int) error {
	fields, err := respFields(ctx, addr, "CLUSTER", "INFO")
	if err != nil {
		return err
	}
	if fields["cluster_state"] != "ok" ||
		fields["cluster_slots_ok"] != "16384" ||
		fields["cluster_known_nodes"] != strconv.Itoa(n) {
		return fmt.Errorf("node %s: cluster_state=%s slots_ok=%s known_nodes=%s",
			addr, fields["cluster_state"], fields["cluster_slots_ok"], fields["cluster_known_nodes"])
	}
	return nil
}

// respFields sends an INFO-style command (INFO, CLUSTER INFO) to the server
// at addr and returns the "name:value" lines of its reply.
func respFields(ctx context.Context, addr string, args ...string) (map[string]string, error) {
	info, err := respDo(ctx, addr, args...)
	if err != nil {
		return nil, err
	}
	fields := map[string]string{}
	for _, line := range strings.Split(info, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
			fields[k] = v
		}
	}
	return fields, nil
}
