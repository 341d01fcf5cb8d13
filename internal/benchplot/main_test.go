package main

import (
	"errors"
	"strings"
	"testing"
)

const sample = `goos: linux
pkg: github.com/golocker/locker/integration/zookeeper
BenchmarkScenarios/OneKey/clients=4-2         	       1	         0 ns/op	       395.0 locker-handoffs/s	         0.97 locker-min/max	       330.0 zklock-handoffs/s
BenchmarkScenarios/OneKey/clients=64-2        	       1	         0 ns/op	       567.0 locker-handoffs/s	       459.0 zklock-handoffs/s
BenchmarkScenarios/ManyKeys/clients=16-2      	       1	         0 ns/op	      2915 locker-ops/s
`

func TestParse(t *testing.T) {
	s, err := parse(strings.NewReader(sample))
	if err != nil {
		t.Fatal(err)
	}
	if s.name != "zookeeper" {
		t.Errorf("store %q, want zookeeper (the pkg line's last element)", s.name)
	}
	if got := strings.Join(s.impls, ","); got != "locker,zklock" {
		t.Errorf("implementations %s, want locker,zklock in order of appearance", got)
	}
	if len(s.clients) != 2 || s.clients[0] != 4 || s.clients[1] != 64 {
		t.Errorf("clients %v, want [4 64]: ManyKeys lines are not one-key points", s.clients)
	}
	if s.rate["zklock"][64] != 459 || s.rate["locker"][4] != 395 {
		t.Errorf("rates %v do not match the input", s.rate)
	}
}

func TestParseNoData(t *testing.T) {
	if _, err := parse(strings.NewReader("pkg: x\nPASS\n")); !errors.Is(err, errNoData) {
		t.Errorf("input without one-key lines: %v, want errNoData", err)
	}
}

func TestWriteSVG(t *testing.T) {
	s, err := parse(strings.NewReader(sample))
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	if err := writeSVG(&b, "a <run>", []store{s}); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{"<svg ", "</svg>", "zookeeper", "zklock", "a &lt;run&gt;", "<polyline "} {
		if !strings.Contains(out, want) {
			t.Errorf("the SVG lacks %q", want)
		}
	}
}
