package contend

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"
)

// TestPairedRatiosMedian: a pause in one window moves one pair's ratio,
// not the reported one, which is the median over the pairs.
func TestPairedRatiosMedian(t *testing.T) {
	impls := []Impl{{Name: "a"}, {Name: "b"}}
	// a runs at b's rate but for one window that a pause cut to a tenth:
	// the ratio of whole turns would be 0.82.
	windows := [][]float64{{100, 100, 10, 100, 100}, {100, 100, 100, 100, 100}}
	r := testing.Benchmark(func(b *testing.B) { pairedRatios(b, impls, windows, "-k") })
	for name, want := range map[string]float64{"a-x-b-k": 1, "a-x-b-q1-k": 1, "a-x-b-q3-k": 1} {
		if got, ok := r.Extra[name]; !ok || got != want {
			t.Errorf("%s = %v (reported %v), want %v: the median of the pairs' ratios", name, got, ok, want)
		}
	}
	if got := quantile([]float64{1, 2, 3, 4}, 0.5); got != 2.5 {
		t.Errorf("the median of 1, 2, 3, 4 = %v, want 2.5", got)
	}
}

// TestAlternatePairedOrder: in each pair every implementation runs one
// window per ctx kind, the order reversed every other pair, and each
// window's rate is returned.
func TestAlternatePairedOrder(t *testing.T) {
	var (
		mu  sync.Mutex
		ran []string
	)
	impl := func(name string) Impl {
		var lk sync.Mutex
		return Impl{Name: name, New: func(*testing.B, string) Mutex {
			return Func(func(context.Context) (func(context.Context) error, error) {
				lk.Lock()
				mu.Lock()
				if len(ran) == 0 || ran[len(ran)-1] != name {
					ran = append(ran, name)
				}
				mu.Unlock()
				return func(context.Context) error { lk.Unlock(); return nil }, nil
			})
		}}
	}
	impls := []Impl{impl("a"), impl("b")}
	const pairs = 3
	// A window (100 ms) that a client scheduled late let pass without an
	// acquisition tells nothing of the order: such a run runs again. A
	// wrong order shows in every run.
	const attempts = 5
	for attempt := 1; ; attempt++ {
		var ws [len(ctxKinds)][][]float64
		r := testing.Benchmark(func(b *testing.B) {
			mu.Lock()
			ran = nil
			mu.Unlock()
			cs := [][]Mutex{{impls[0].New(b, "")}, {impls[1].New(b, "")}}
			var ts [len(ctxKinds)][]tally
			for k := range ts {
				ts[k] = make([]tally, len(impls))
			}
			ws = alternatePaired(b, impls, cs, pairs*100*time.Millisecond, true, pairs, &ts)
		})
		if r.N == 0 {
			t.Fatal("the run failed")
		}
		empty := false
		for k := range ws {
			for i := range impls {
				empty = empty || len(ws[k][i]) == pairs && slices.Min(ws[k][i]) == 0
			}
		}
		if empty && attempt < attempts {
			t.Logf("run %d: a window without an acquisition, too short to tell; again", attempt)
			continue
		}
		// a b (kind 1) a b (kind 2) | b a b a | a b a b, runs of one name merged
		want := []string{"a", "b", "a", "b", "a", "b", "a", "b", "a", "b"}
		if !slices.Equal(ran, want) {
			t.Errorf("the implementations ran in the order %v, want %v", ran, want)
		}
		for k := range ws {
			for i := range impls {
				if len(ws[k][i]) != pairs || slices.Min(ws[k][i]) <= 0 {
					t.Errorf("kind %d, %s: window rates %v, want %d rates above 0", k, impls[i].Name, ws[k][i], pairs)
				}
			}
		}
		return
	}
}
