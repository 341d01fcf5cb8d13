// Package freeport picks loopback TCP ports for test servers.
//
// Ports lie below the kernel's ephemeral range when it leaves room: a
// stopped server's port there cannot become the local port of another
// process's outgoing connection (the kernel picks those from the ephemeral
// range), which would fail the server's restart on the same port for as
// long as that connection lived.
package freeport

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
)

const (
	// LowestPort is the lowest port chosen: below it lie the fixed ports
	// of common services.
	LowestPort = 20000
	// defaultEphemeralLow is the start of the ephemeral range where it
	// cannot be read: Linux's default (32768); macOS and Windows start
	// higher (49152).
	defaultEphemeralLow = 32768
	// MinSpan is the fewest ports below the ephemeral range worth a
	// random choice; with fewer, the kernel chooses (ephemeral) ports.
	MinSpan = 1000
	// tries bounds the random choices per port.
	tries = 100
)

// ephemeralRangeFile holds Linux's ephemeral port range ("low high").
const ephemeralRangeFile = "/proc/sys/net/ipv4/ip_local_port_range"

// EphemeralRange returns the kernel's ephemeral port range.
func EphemeralRange() (low, high int, err error) {
	b, err := os.ReadFile(ephemeralRangeFile)
	if err != nil {
		return 0, 0, err
	}
	if _, err := fmt.Sscan(string(b), &low, &high); err != nil {
		return 0, 0, fmt.Errorf("freeport: %s: %q: %w", ephemeralRangeFile, b, err)
	}
	return low, high, nil
}

// ephemeralLow returns the first port of the kernel's ephemeral range.
func ephemeralLow() int {
	if low, _, err := EphemeralRange(); err == nil && low > 0 {
		return low
	}
	return defaultEphemeralLow
}

// Ports returns n distinct loopback ports that were free a moment ago,
// below the ephemeral range when it leaves room (see LowestPort). Another
// process may take one before the caller binds it; callers retry with
// other ports when a server fails to start.
func Ports(n int) ([]int, error) {
	lns := make([]net.Listener, 0, n)
	defer func() {
		for _, ln := range lns {
			ln.Close()
		}
	}()
	ports := make([]int, 0, n)
	span := ephemeralLow() - LowestPort
	for range n {
		var ln net.Listener
		var err error
		if span >= MinSpan {
			for range tries {
				if ln, err = net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", LowestPort+rand.IntN(span))); err == nil {
					break
				}
			}
		}
		if ln == nil {
			if ln, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
				return nil, fmt.Errorf("freeport: find a free port: %w", err)
			}
		}
		lns = append(lns, ln)
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// Port returns one port as Ports does.
func Port() (int, error) {
	ps, err := Ports(1)
	if err != nil {
		return 0, err
	}
	return ps[0], nil
}
