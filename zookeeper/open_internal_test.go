package zookeeper

import (
	"context"
	"crypto/rand"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/golocker/locker/internal/storeenv"
)

// TestOwnedConnectionSendsSessionEventsOnly: the events channel of a
// connection Open makes carries its session events and no watch event, so
// that the Locker's goroutine that follows the session does not wake once
// per hand-off.
func TestOwnedConnectionSendsSessionEventsOnly(t *testing.T) {
	srv := storeenv.ZooKeeper(t)
	conn, events, err := connectOwned(srv.Addrs(), 3*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	// The session events come first.
	for conn.State() != zk.StateHasSession {
		select {
		case ev := <-events:
			if ev.Type != zk.EventSession {
				t.Fatalf("event %+v before the session; want session events only", ev)
			}
		case <-ctx.Done():
			t.Fatal("no session")
		}
	}
	// A watch event reaches its watcher, and not the channel.
	p := "/locker-owned-" + rand.Text()[:10]
	if _, err := conn.Create(p, nil, zk.FlagEphemeral, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatal(err)
	}
	_, _, watch, err := conn.GetW(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := conn.Delete(p, -1); err != nil {
		t.Fatal(err)
	}
	select {
	case ev := <-watch:
		if ev.Type != zk.EventNodeDeleted {
			t.Fatalf("watch event %+v; want the deletion of %s", ev, p)
		}
	case <-ctx.Done():
		t.Fatal("no watch event")
	}
	for {
		select {
		case ev := <-events:
			if ev.Type != zk.EventSession {
				t.Fatalf("the events channel of a connection of a Locker of its own received %+v; want session events only", ev)
			}
			continue
		default:
		}
		return
	}
}
