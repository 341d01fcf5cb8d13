package main

import (
	"bytes"
	"context"
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/golocker/locker"
	"github.com/golocker/locker/backends"
)

// TestHelpURLsAreAccepted opens every store URL that -help shows, so that
// a user who copies one gets a connection attempt, never a refused URL.
func TestHelpURLsAreAccepted(t *testing.T) {
	var out bytes.Buffer
	parseFlags([]string{"-help"}, &out)
	urls := regexp.MustCompile(`[a-z]+://[^\s,\[]+`).FindAllString(out.String(), -1)
	if len(urls) < 4 {
		t.Fatalf("-help shows %d store URLs, want one per scheme:\n%s", len(urls), out.String())
	}
	var mux locker.Mux
	if err := backends.Register(&mux); err != nil {
		t.Fatal(err)
	}
	for _, u := range urls {
		if strings.HasSuffix(u, "…") {
			continue
		}
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
		l, err := locker.Open(ctx, &mux, u)
		cancel()
		if errors.Is(err, locker.ErrBadURL) {
			t.Errorf("-help shows %s, which the library refuses: %v", u, err)
		}
		if err == nil {
			l.Close()
		}
	}
}
