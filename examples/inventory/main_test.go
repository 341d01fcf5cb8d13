package main

import (
	"bytes"
	"regexp"
	"testing"
)

func TestOversellDemo(t *testing.T) {
	var out bytes.Buffer
	if err := run(t.Context(), &out, 16, 40); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	t.Log("\n" + out.String())
	m := regexp.MustCompile(`stock at the end\s+(-?\d+)\s+(-?\d+)`).FindStringSubmatch(out.String())
	if m == nil || m[2] != "0" {
		t.Fatalf("with locker.Do the stock must end at exactly 0: %v", m)
	}
	if !regexp.MustCompile(`orders taken\s+\d+\s+40\n`).MatchString(out.String()) {
		t.Fatalf("with locker.Do there must be exactly as many orders as items")
	}
	if !regexp.MustCompile(`SKUs oversold\s+0\n`).MatchString(out.String()) {
		t.Fatalf("with locker.LockMulti no SKU may be oversold")
	}
}
