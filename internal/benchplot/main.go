// Command benchplot draws the one-key scenario of the Scenarios benchmarks
// as an SVG: hand-offs per second against the number of waiting clients,
// one panel per store, one line per implementation.
//
// It reads the text of go test -bench runs of integration/<store>
// BenchmarkScenarios, one file per store, and writes the SVG to stdout:
//
//	go run ./internal/benchplot -title "…" redis.txt etcd.txt zookeeper.txt mysql.txt > docs/handoffs.svg
//
// The store of a file is the last element of its "pkg:" line. A metric
// "<impl>-handoffs/s" of a BenchmarkScenarios/OneKey/clients=N line is
// implementation impl's rate at N clients.
package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"html"
	"io"
	"math"
	"os"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

func main() {
	title := flag.String("title", "", "title line, e.g. the date, commit and machine of the run")
	flag.Usage = func() {
		fmt.Fprintln(flag.CommandLine.Output(), "usage: benchplot [-title text] bench-output-file...")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() == 0 {
		flag.Usage()
		os.Exit(2)
	}
	var stores []store
	for _, name := range flag.Args() {
		f, err := os.Open(name)
		if err != nil {
			fmt.Fprintln(os.Stderr, "benchplot:", err)
			os.Exit(1)
		}
		s, err := parse(f)
		f.Close()
		if err != nil {
			fmt.Fprintf(os.Stderr, "benchplot: %s: %v\n", name, err)
			os.Exit(1)
		}
		stores = append(stores, s)
	}
	if err := writeSVG(os.Stdout, *title, stores); err != nil {
		fmt.Fprintln(os.Stderr, "benchplot:", err)
		os.Exit(1)
	}
}

// store is one store's one-key results.
type store struct {
	name    string
	clients []int                      // ascending
	impls   []string                   // in the order of their first metric
	rate    map[string]map[int]float64 // impl → clients → hand-offs/s
}

var oneKey = regexp.MustCompile(`^BenchmarkScenarios/OneKey/clients=(\d+)(?:-\d+)?\s`)

// errNoData reports input with no one-key line.
var errNoData = errors.New("no BenchmarkScenarios/OneKey line with a -handoffs/s metric")

// parse reads one go test -bench output.
func parse(r io.Reader) (store, error) {
	s := store{rate: map[string]map[int]float64{}}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	for sc.Scan() {
		line := sc.Text()
		if p, ok := strings.CutPrefix(line, "pkg: "); ok {
			s.name = path.Base(strings.TrimSpace(p))
			continue
		}
		m := oneKey.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		n, err := strconv.Atoi(m[1])
		if err != nil {
			return s, fmt.Errorf("bad client count in %q", line)
		}
		fields := strings.Fields(line)
		// name, iterations, then value-unit pairs.
		for i := 2; i+1 < len(fields); i += 2 {
			impl, ok := strings.CutSuffix(fields[i+1], "-handoffs/s")
			if !ok {
				continue
			}
			v, err := strconv.ParseFloat(fields[i], 64)
			if err != nil {
				return s, fmt.Errorf("bad value %q of %s", fields[i], fields[i+1])
			}
			if s.rate[impl] == nil {
				s.rate[impl] = map[int]float64{}
				s.impls = append(s.impls, impl)
			}
			s.rate[impl][n] = v
			if !slices.Contains(s.clients, n) {
				s.clients = append(s.clients, n)
			}
		}
	}
	if err := sc.Err(); err != nil {
		return s, err
	}
	if len(s.impls) == 0 {
		return s, errNoData
	}
	if s.name == "" {
		s.name = "?"
	}
	slices.Sort(s.clients)
	return s, nil
}

// colors of the implementations; this library's first.
var colors = map[string]string{
	"locker":    "#1f77b4",
	"fair":      "#1f77b4",
	"unfair":    "#6baed6",
	"floor":     "#7f7f7f",
	"fenced":    "#bcbd22",
	"redislock": "#d62728",
	"zklock":    "#d62728",
	"mutex":     "#d62728",
	"poller":    "#ff7f0e",
}

var spare = []string{"#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf"}

const (
	panelW, panelH = 300, 260
	left, right    = 55, 10
	top, bottom    = 30, 95
)

// writeSVG draws one panel per store, side by side.
func writeSVG(w io.Writer, title string, stores []store) error {
	width := panelW * len(stores)
	height := panelH + 30
	b := &strings.Builder{}
	fmt.Fprintf(b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="11">`+"\n", width, height)
	fmt.Fprintf(b, `<rect width="%d" height="%d" fill="white"/>`+"\n", width, height)
	fmt.Fprintf(b, `<text x="8" y="16" font-size="13">Hand-offs/s on one key against clients (log scale)%s</text>`+"\n", html.EscapeString(sep(title)))
	for i, s := range stores {
		panel(b, s, i*panelW, 30)
	}
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

func sep(title string) string {
	if title == "" {
		return ""
	}
	return " · " + title
}

// panel draws store s with its top-left corner at (x0, y0).
func panel(b *strings.Builder, s store, x0, y0 int) {
	plotW := float64(panelW - left - right)
	plotH := float64(panelH - top - bottom)
	px, py := float64(x0+left), float64(y0+top)
	ymax := 0.0
	for _, impl := range s.impls {
		for _, v := range s.rate[impl] {
			ymax = max(ymax, v)
		}
	}
	ymax = niceCeil(ymax)
	lo, hi := math.Log(float64(s.clients[0])), math.Log(float64(s.clients[len(s.clients)-1]))
	xAt := func(n int) float64 {
		if hi == lo {
			return px + plotW/2
		}
		return px + (math.Log(float64(n))-lo)/(hi-lo)*plotW
	}
	yAt := func(v float64) float64 { return py + plotH - v/ymax*plotH }

	fmt.Fprintf(b, `<text x="%.0f" y="%d" font-size="12" font-weight="bold">%s</text>`+"\n", px, y0+15, html.EscapeString(s.name))
	for i := 0; i <= 4; i++ {
		v := ymax * float64(i) / 4
		y := yAt(v)
		fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#ddd"/>`+"\n", px, y, px+plotW, y)
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="end">%s</text>`+"\n", px-4, y+4, human(v))
	}
	for _, n := range s.clients {
		x := xAt(n)
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="middle">%d</text>`+"\n", x, py+plotH+14, n)
	}
	fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="middle">clients on one key</text>`+"\n", px+plotW/2, py+plotH+28)
	k := 0
	for i, impl := range s.impls {
		c, ok := colors[impl]
		if !ok {
			c = spare[k%len(spare)]
			k++
		}
		var pts []string
		for _, n := range s.clients {
			if v, ok := s.rate[impl][n]; ok {
				pts = append(pts, fmt.Sprintf("%.1f,%.1f", xAt(n), yAt(v)))
				fmt.Fprintf(b, `<circle cx="%.1f" cy="%.1f" r="2.5" fill="%s"/>`+"\n", xAt(n), yAt(v), c)
			}
		}
		fmt.Fprintf(b, `<polyline points="%s" fill="none" stroke="%s" stroke-width="2"/>`+"\n", strings.Join(pts, " "), c)
		ly := py + plotH + 44 + float64(i/2)*14
		lx := px + float64(i%2)*plotW/2
		fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="2"/>`+"\n", lx, ly-4, lx+14, ly-4, c)
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f">%s</text>`+"\n", lx+18, ly, html.EscapeString(impl))
	}
}

// niceCeil rounds v up to 1, 2 or 5 times a power of ten.
func niceCeil(v float64) float64 {
	if v <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if v <= m*p {
			return m * p
		}
	}
	return 10 * p
}

// human formats an axis value: 2500 is "2.5k".
func human(v float64) string {
	if v >= 1000 {
		return strconv.FormatFloat(v/1000, 'f', -1, 64) + "k"
	}
	return strconv.FormatFloat(v, 'f', -1, 64)
}
