package contend

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

// ScenariosPaired is Scenarios with the contended scenarios' turns (OneKey
// and ManyKeys) cut into pairs windows per implementation and ctx kind,
// each d/pairs long. In each pair the implementations run one window each,
// one after the other (their order reversed every other pair), each in a
// run of its own that counts only the window, after an uncounted third of
// one with the same kind of ctx; a ratio of
// rates ("<name>-x-<other>") is then the median over the pairs of the two
// windows' ratio, reported with its quartiles ("<name>-x-<other>-q1",
// "-q3"). The other figures are those of Scenarios, over all windows.
//
// A pause that lands on one implementation's turn (a GC, a session event,
// the server's JIT, another process's burst) moves the ratio of whole
// turns by as much as it costs that turn; it moves one pair of the median
// only. Its metrics have Scenarios' names, so that a script reads both.
func ScenariosPaired(b *testing.B, impls []Impl, d time.Duration, pairs int) {
	if pairs < 1 {
		b.Fatalf("contend: ScenariosPaired with %d pairs: want at least 1", pairs)
	}
	scenarios(b, impls, d, pairs)
}

// alternatePaired runs the clients cs[i] of impls[i] in pairs windows of
// d/pairs per implementation and ctx kind, the implementations one after
// the other in each pair, first to last in even pairs and last to first in
// odd ones. Each window is counted in a run of its own, after an
// uncounted third of one with its kind of ctx (runWindow): the clients'
// first, simultaneous attempts and their last ones, which wait out the
// queue after the window, would weigh on a short window's rate. It adds
// each window to ts and returns each implementation's rate in each
// window: [kind][impl][pair].
func alternatePaired(b *testing.B, impls []Impl, cs [][]Mutex, d time.Duration, shared bool, pairs int, ts *[len(ctxKinds)][]tally) [len(ctxKinds)][][]float64 {
	w := d / time.Duration(pairs)
	var ws [len(ctxKinds)][][]float64
	for k := range ws {
		ws[k] = make([][]float64, len(impls))
	}
	order := make([]int, len(impls))
	for i := range order {
		order[i] = i
	}
	for range pairs {
		for k, kind := range ctxKinds {
			for _, i := range order {
				t := &ts[k][i]
				acq, el := t.acquisitions(), t.elapsed
				runWindow(b, impls[i], cs[i], w/pairedWarm, w, shared, kind, t)
				ws[k][i] = append(ws[k][i], float64(t.acquisitions()-acq)/(t.elapsed-el).Seconds())
			}
		}
		slices.Reverse(order)
	}
	return ws
}

// pairedWarm is a window over the uncounted start of its run.
const pairedWarm = 3

// acquisitions is the number of acquisitions t counted.
func (t *tally) acquisitions() int {
	n := 0
	for _, c := range t.counts {
		n += c
	}
	return n
}

// pairedRatios reports, as ratios does, the median over the pairs of
// ratio of the windows' rates (windows[impl][pair]), and its quartiles,
// and logs every pair's.
func pairedRatios(b *testing.B, impls []Impl, windows [][]float64, suffix string) {
	ref := slices.IndexFunc(impls, func(impl Impl) bool { return impl.Reference })
	for i := range impls {
		for j := range impls {
			if i == j || (i != 0 && j != ref) {
				continue
			}
			rs := make([]float64, len(windows[i]))
			for p := range rs {
				rs[p] = windows[i][p] / windows[j][p]
			}
			name := impls[i].Name + "-x-" + impls[j].Name
			b.Logf("%s%s per pair: %s", name, suffix, formatRatios(rs))
			slices.Sort(rs)
			b.ReportMetric(quantile(rs, 0.5), name+suffix)
			b.ReportMetric(quantile(rs, 0.25), name+"-q1"+suffix)
			b.ReportMetric(quantile(rs, 0.75), name+"-q3"+suffix)
		}
	}
}

// quantile is the q-quantile of sorted, interpolated between neighbours
// (the median of an even count is the mean of the middle two).
func quantile(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	x := q * float64(len(sorted)-1)
	lo := int(x)
	if lo+1 >= len(sorted) {
		return sorted[lo]
	}
	return sorted[lo] + (x-float64(lo))*(sorted[lo+1]-sorted[lo])
}

func formatRatios(rs []float64) string {
	var s strings.Builder
	for i, r := range rs {
		if i > 0 {
			s.WriteString(" ")
		}
		fmt.Fprintf(&s, "%.2f", r)
	}
	return s.String()
}
