package locker_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/golocker/locker"
)

func TestRedactedURL(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"redis://u:pw@h:1/0", "redis://u:xxxxx@h:1/0"},
		{"redis://:pw@h:1", "redis://:xxxxx@h:1"},
		{"redis://u@h:1", "redis://u@h:1"},
		{"redis://h:1", "redis://h:1"},
		{"u:s3cret@127.0.0.1:6379", "u:xxxxx@127.0.0.1:6379"},
		{"redis//user:secret@host", "redis//user:xxxxx@host"},
		{"redis:/user:secret@host", "redis:/user:xxxxx@host"},
		{"redis:///user:secret@host", "redis:///user:xxxxx@host"},
		{"redis:user:secret@host", "redis:xxxxx@host"},
		{"redis://u:p%40ss@h", "redis://u:xxxxx@h"},
		{"redis://u:p@ss@h", "redis://u:xxxxx@h"},
		{"redis://u:pa/ss@h", "redis://u:xxxxx@h"},
		{"redis://u:p@h1:1,u2:p2@h2:2", "redis://u:xxxxx@h2:2"},
		{"redis://h:1?password=pw&db=1", "redis://h:1?password=xxxxx&db=1"},
		{"redis://h:1?db=1&sentinel_password=pw", "redis://h:1?db=1&sentinel_password=xxxxx"},
		{"redis://h:1?pass%77ord=pw", "redis://h:1?pass%77ord=xxxxx"},
		{"redis://h:1?token=&x=1", "redis://h:1?token=xxxxx&x=1"},
		{"", ""},
	} {
		if got := locker.RedactedURL(c.in); got != c.want {
			t.Errorf("RedactedURL(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

// TestRedactURLHidesPartsNotWords: a password is hidden where it is a part
// of a URL, and its text elsewhere stays, so that a message keeps its words.
func TestRedactURLHidesPartsNotWords(t *testing.T) {
	raw := "redis://u:dial@127.0.0.1:1/0?token=tcp"
	cause := errors.New("dial tcp 127.0.0.1:1: connect: connection refused")
	err := fmt.Errorf("open %s (dsn u:dial@tcp(127.0.0.1:1)/, query token=tcp): %w", raw, cause)
	got := locker.RedactURL(err, raw).Error()
	want := "open redis://u:xxxxx@127.0.0.1:1/0?token=xxxxx (dsn u:xxxxx@tcp(127.0.0.1:1)/, query token=xxxxx): dial tcp 127.0.0.1:1: connect: connection refused"
	if got != want {
		t.Errorf("RedactURL:\n got %s\nwant %s", got, want)
	}
	if !errors.Is(locker.RedactURL(err, raw), cause) {
		t.Error("RedactURL must keep the error chain")
	}
	if locker.RedactURL(nil, raw) != nil {
		t.Error("RedactURL(nil) must be nil")
	}
}
