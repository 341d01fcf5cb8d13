package leakcheck

import (
	"strings"
	"testing"
	"time"
)

// TestFindsALeak checks that a goroutine left running is found, with its
// stack, and that none is found once it ended.
func TestFindsALeak(t *testing.T) {
	stop := make(chan struct{})
	go leakyWorker(stop)
	leaked := Others()
	if len(leaked) != 1 || !strings.Contains(leaked[0], "created by github.com/golocker/locker/internal/leakcheck.TestFindsALeak") {
		t.Fatalf("Others() = %q; want the one goroutine the test started", leaked)
	}
	close(stop)
	deadline := time.Now().Add(5 * time.Second)
	for len(Others()) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the ended goroutine is still reported: %q", Others())
		}
		time.Sleep(time.Millisecond)
	}
	if err := Find(); err != nil {
		t.Fatalf("Find with no goroutine left: %v", err)
	}
}

func leakyWorker(stop chan struct{}) { <-stop }

func TestMain(m *testing.M) { Main(m) }
