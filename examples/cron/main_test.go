package main

import (
	"bytes"
	"context"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"
	"time"
)

// TestDemo builds the demo and runs it as a user would, in a short mode: 3
// replica processes against the embedded etcd, one killed while it holds
// locks. It asserts zero double runs and a takeover with higher tokens.
func TestDemo(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the demo for several seconds")
	}
	bin := filepath.Join(t.TempDir(), "cron")
	build := exec.Command("go", "build", "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, "-replicas", "3", "-duration", "7s", "-ttl", "1s", "-kill-after", "2s", "-plans", "3")
	cmd.Stdout, cmd.Stderr = &out, &out
	// The demo's child processes write to its stderr, our pipe: after
	// the ctx's kill of the demo, Run waits that long for them, not for
	// ever.
	cmd.WaitDelay = 10 * time.Second
	if err := cmd.Run(); err != nil {
		t.Fatalf("the demo must exit 0 (no double runs): %v\n%s", err, out.String())
	}
	s := out.String()
	t.Log("\n" + s)
	if !regexp.MustCompile(`(?m)^double runs: 0$`).MatchString(s) {
		t.Errorf("the summary must report 0 double runs")
	}
	if !regexp.MustCompile(`killed replica \d with SIGKILL while it held [1-9]`).MatchString(s) {
		t.Errorf("a replica holding locks must be killed")
	}
	m := regexp.MustCompile(`token (\d+)\), taken over by replica \d with token (\d+)`).FindAllStringSubmatch(s, -1)
	if len(m) == 0 {
		t.Fatalf("the killed replica's keys must be taken over")
	}
	for _, g := range m {
		if len(g[1]) > len(g[2]) || (len(g[1]) == len(g[2]) && g[1] >= g[2]) {
			t.Errorf("a takeover must carry a higher token: %s then %s", g[1], g[2])
		}
	}
}

func TestFlags(t *testing.T) {
	var out bytes.Buffer
	if _, err := parseFlags([]string{"-replicas", "0"}, &out); err == nil {
		t.Error("-replicas 0 must be refused")
	}
	out.Reset()
	if _, err := parseFlags([]string{"-help"}, &out); err == nil || !bytes.Contains(out.Bytes(), []byte("-store")) {
		t.Errorf("-help must explain the flags: %v\n%s", err, out.String())
	}
	cfg, err := parseFlags([]string{"-duration", "9s"}, &out)
	if err != nil || cfg.killAt != 3*time.Second {
		t.Errorf("default kill time is a third of -duration: %v %v", cfg.killAt, err)
	}
}
