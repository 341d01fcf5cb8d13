package driver

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestPage: pages of every size, read in turn from their cursors, give
// every key once, in ascending order, whatever the order of the input.
func TestPage(t *testing.T) {
	for _, n := range []int{0, 1, 2, 5, 9, 10, 11, 100, 257} {
		keys := make([]string, n)
		for i := range keys {
			keys[i] = fmt.Sprintf("k%04d", i)
		}
		for _, limit := range []int{0, 1, 2, 3, 10, 300} {
			var got []string
			cursor := ""
			for pages := 0; ; pages++ {
				if pages > n+1 {
					t.Fatalf("n=%d limit=%d: the cursor does not advance: %q", n, limit, cursor)
				}
				shuffled := slices.Clone(keys)
				rand.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
				page, next := Page(slices.Values(shuffled), cursor, limit)
				if len(page) > max(limit, 1) {
					t.Fatalf("n=%d limit=%d: a page of %d keys", n, limit, len(page))
				}
				got = append(got, page...)
				if next == "" {
					break
				}
				cursor = next
			}
			if !slices.Equal(got, keys) {
				t.Errorf("n=%d limit=%d: pages gave %v; want every key once, in order", n, limit, got)
			}
		}
	}
}

// gateInspector holds every Inspect until want calls are in flight at
// once, or its patience runs out; keys ending in "free" are free, "bad"
// fails.
type gateInspector struct {
	want     int
	mu       sync.Mutex
	inFlight int
	reached  chan struct{}
}

func (g *gateInspector) Inspect(ctx context.Context, key string) (Status, error) {
	g.mu.Lock()
	g.inFlight++
	if g.inFlight == g.want {
		close(g.reached)
	}
	g.mu.Unlock()
	select {
	case <-g.reached:
	case <-time.After(10 * time.Second):
		return Status{}, errors.New("inspected one at a time")
	case <-ctx.Done():
		return Status{}, ctx.Err()
	}
	switch {
	case strings.HasSuffix(key, "bad"):
		return Status{}, errors.New("bad key " + key)
	case strings.HasSuffix(key, "free"):
		return Status{}, nil
	}
	return Status{Held: true, Label: key}, nil
}

// TestInspectAll: the keys are read several at once, the held ones come
// back in the order of keys, and an error ends it.
func TestInspectAll(t *testing.T) {
	keys := []string{"a", "b-free", "c", "d", "e-free", "f", "g", "h"}
	page, err := InspectAll(t.Context(), &gateInspector{want: 4, reached: make(chan struct{})}, keys)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, ks := range page {
		if ks.Label != ks.Key {
			t.Errorf("key %s has the status of %s", ks.Key, ks.Label)
		}
		got = append(got, ks.Key)
	}
	if want := []string{"a", "c", "d", "f", "g", "h"}; !slices.Equal(got, want) {
		t.Errorf("InspectAll = %v, want %v", got, want)
	}
	_, err = InspectAll(t.Context(), &gateInspector{want: 2, reached: make(chan struct{})}, []string{"a", "b-bad", "c"})
	if err == nil || err.Error() != "bad key b-bad" {
		t.Errorf("InspectAll with a failing key = %v, want its error", err)
	}
}
