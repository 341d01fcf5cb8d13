package freeport

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"testing"
)

// TestPortsBelowEphemeralRange checks that the ports lie below the kernel's
// ephemeral range, distinct and bindable.
func TestPortsBelowEphemeralRange(t *testing.T) {
	low, high, err := EphemeralRange()
	if errors.Is(err, fs.ErrNotExist) {
		t.Skipf("no ephemeral port range to check against: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	if low-LowestPort < MinSpan {
		t.Skipf("the ephemeral range %d-%d leaves no room below it", low, high)
	}
	ports, err := Ports(8)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	for _, p := range ports {
		if p < LowestPort || p >= low {
			t.Errorf("port %d is not in %d-%d, below the ephemeral range %d-%d", p, LowestPort, low-1, low, high)
		}
		if seen[p] {
			t.Errorf("port %d given twice in %v", p, ports)
		}
		seen[p] = true
		ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			t.Errorf("port %d cannot be bound: %v", p, err)
			continue
		}
		ln.Close()
	}
}
