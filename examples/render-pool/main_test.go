package main

import (
	"bytes"
	"context"
	"io"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestDemo builds the demo and runs it as a user would, in a short mode: 6
// worker processes against the embedded etcd (loopback), one killed while
// it holds a permit. It asserts that the holders never exceeded the limit
// and that the killed worker's permit came back.
func TestDemo(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the demo for several seconds")
	}
	bin := filepath.Join(t.TempDir(), "render-pool")
	build := exec.Command("go", "build", "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, "-workers", "6", "-duration", "8s", "-ttl", "1s", "-kill-after", "2s")
	cmd.Stdout, cmd.Stderr = &out, &out
	// The demo's child processes write to its stderr, our pipe: after
	// the ctx's kill of the demo, Run waits that long for them, not for
	// ever.
	cmd.WaitDelay = 10 * time.Second
	if err := cmd.Run(); err != nil {
		t.Fatalf("the demo must exit 0 (never more than 4 holders, the permit back): %v\n%s", err, out.String())
	}
	s := out.String()
	t.Log("\n" + s)
	if !regexp.MustCompile(`(?m)^most holders at once: [1-4] \(limit 4\)$`).MatchString(s) {
		t.Errorf("the summary must report at most 4 holders at once")
	}
	if !regexp.MustCompile(`killed worker \d+ with SIGKILL while it held a permit`).MatchString(s) {
		t.Errorf("a worker holding a permit must be killed")
	}
	if !regexp.MustCompile(`the killed worker's permit: back \S+ after the kill`).MatchString(s) {
		t.Errorf("the killed worker's permit must come back")
	}
}

// TestSummaryChecks: the demo's own checks fail on more holders than the
// limit, and on a killed worker's permit that never comes back.
func TestSummaryChecks(t *testing.T) {
	cfg := config{limit: 2, duration: 4 * time.Second, ttl: time.Second}
	start := time.Unix(100, 0)
	at := func(d time.Duration) int64 { return start.Add(d).UnixNano() }
	ev := func(kind string, w int, d time.Duration) event { return event{Kind: kind, Worker: w, At: at(d)} }
	kill := start.Add(time.Second)

	// Three renders overlap at 0.6s, under a limit of 2.
	over := []event{ev("start", 1, 0), ev("start", 2, 500*time.Millisecond), ev("start", 3, 600*time.Millisecond),
		ev("end", 1, 700*time.Millisecond), ev("end", 2, 800*time.Millisecond), ev("end", 3, 900*time.Millisecond),
		ev("start", 4, 900*time.Millisecond), ev("start", 1, 2*time.Second), ev("start", 2, 2*time.Second)}
	if err := summarize(io.Discard, cfg, over, start, 4, kill); err == nil || !strings.Contains(err.Error(), "above the limit") {
		t.Errorf("3 holders under a limit of 2: want an error naming the limit, got %v", err)
	}
	// Worker 4 killed holding a permit, and the other workers never again
	// hold both permits.
	never := []event{ev("start", 1, 0), ev("start", 4, 0), ev("end", 1, 500*time.Millisecond),
		ev("start", 2, 2*time.Second), ev("end", 2, 3*time.Second)}
	if err := summarize(io.Discard, cfg, never, start, 4, kill); err == nil || !strings.Contains(err.Error(), "never came back") {
		t.Errorf("a permit never back: want an error saying so, got %v", err)
	}
	// Back: workers 1 and 2 hold both permits after the kill.
	back := append(never[:3:3], ev("start", 1, 2*time.Second), ev("start", 2, 2100*time.Millisecond),
		ev("end", 1, 3*time.Second), ev("end", 2, 3*time.Second))
	if err := summarize(io.Discard, cfg, back, start, 4, kill); err != nil {
		t.Errorf("within the limit, the permit back: %v", err)
	}
}

func TestFlags(t *testing.T) {
	var out bytes.Buffer
	if _, err := parseFlags([]string{"-limit", "6", "-workers", "6"}, &out); err == nil {
		t.Error("-limit not below -workers must be refused")
	}
	out.Reset()
	if _, err := parseFlags([]string{"-help"}, &out); err == nil || !bytes.Contains(out.Bytes(), []byte("-store")) {
		t.Errorf("-help must explain the flags: %v\n%s", err, out.String())
	}
	cfg, err := parseFlags([]string{"-duration", "12s"}, &out)
	if err != nil || cfg.killAt != 3*time.Second {
		t.Errorf("default kill time is a quarter of -duration: %v %v", cfg.killAt, err)
	}
}
