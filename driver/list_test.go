package driver

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
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
