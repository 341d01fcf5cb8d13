package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
)

// modulePrefix is left out of package names in the summary.
const modulePrefix = "github.com/golocker/locker/"

// event is one line of go test -json (see go doc test2json), with the
// fields used here.
type event struct {
	Action  string
	Package string
	Test    string
	Output  string
}

// report prints go test's usual output from its -json events and counts
// the conformance cases of every harness.
type report struct {
	w         io.Writer
	cases     map[string]bool
	allowed   []allowance
	pkgs      map[string]*pkgState
	pkgOrder  []string
	harnesses map[string]*counts
	skips     []skip
	failed    bool // a test, a package or a build failed
}

// pkgState is the output of one package so far.
type pkgState struct {
	lines  []line              // in order, for printing
	byTest map[string][]string // the same, by test, for skip messages
	result map[string]string   // test → pass, fail or skip
	done   bool
}

type line struct{ test, text string }

// counts are the cases of one harness, by outcome.
type counts struct{ passed, failed, skipped int }

// skip is a conformance case (or a whole harness, with no case) that
// skipped.
type skip struct {
	harness, caseName, message string
	allowed                    *allowance // nil: not a documented property
}

func newReport(w io.Writer, caseNames []string, allowed []allowance) *report {
	r := &report{w: w, cases: map[string]bool{}, allowed: allowed,
		pkgs: map[string]*pkgState{}, harnesses: map[string]*counts{}}
	for _, n := range caseNames {
		r.cases[n] = true
	}
	return r
}

// read handles every event of in; lines that are not events are printed as
// they are.
func (r *report) read(in io.Reader) error {
	br := bufio.NewReader(in)
	for {
		b, err := br.ReadBytes('\n')
		if len(b) > 0 {
			var e event
			if b[0] != '{' || json.Unmarshal(b, &e) != nil || e.Action == "" {
				_, _ = r.w.Write(b)
			} else {
				r.handle(e)
			}
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

func (r *report) pkg(name string) *pkgState {
	p := r.pkgs[name]
	if p == nil {
		p = &pkgState{byTest: map[string][]string{}, result: map[string]string{}}
		r.pkgs[name] = p
		r.pkgOrder = append(r.pkgOrder, name)
	}
	return p
}

func (r *report) handle(e event) {
	switch e.Action {
	case "build-output":
		_, _ = io.WriteString(r.w, e.Output)
		return
	case "build-fail":
		r.failed = true
		return
	}
	if e.Package == "" {
		return
	}
	p := r.pkg(e.Package)
	switch e.Action {
	case "output":
		p.lines = append(p.lines, line{e.Test, e.Output})
		if e.Test != "" {
			p.byTest[e.Test] = append(p.byTest[e.Test], e.Output)
		}
	case "pass", "fail", "skip":
		if e.Action == "fail" {
			r.failed = true
		}
		if e.Test == "" {
			r.flush(e.Package, p, e.Action)
			return
		}
		p.result[e.Test] = e.Action
		r.conformance(e.Package, p, e.Test, e.Action)
	}
}

// conformance counts test when it is a conformance case, and records a
// case or a harness that skipped.
func (r *report) conformance(pkg string, p *pkgState, test, action string) {
	parts := strings.Split(test, "/")
	if !strings.HasPrefix(parts[0], "TestConformance") {
		return
	}
	last := len(parts) - 1
	if last > 0 && r.cases[parts[last]] {
		h := strings.TrimPrefix(pkg, modulePrefix) + " " + strings.Join(parts[:last], "/")
		c := r.harnesses[h]
		if c == nil {
			c = &counts{}
			r.harnesses[h] = c
		}
		switch action {
		case "pass":
			c.passed++
		case "fail":
			c.failed++
		case "skip":
			c.skipped++
			r.addSkip(h, parts[last], message(p.byTest[test]))
		}
		return
	}
	if action == "skip" {
		// A harness (or a part of one) that skipped as a whole.
		r.addSkip(strings.TrimPrefix(pkg, modulePrefix)+" "+test, "", message(p.byTest[test]))
	}
}

func (r *report) addSkip(harness, caseName, msg string) {
	s := skip{harness: harness, caseName: caseName, message: msg}
	for i := range r.allowed {
		if r.allowed[i].allows(harness, caseName, msg) {
			s.allowed = &r.allowed[i]
			break
		}
	}
	r.skips = append(r.skips, s)
}

// message is the last thing a test logged (its Skip's message, when it
// skipped), on one line: the last line of out that starts with a file:line
// position, and the indented lines after it; else every line but go test's
// own.
func message(out []string) string {
	var parts, last []string
	for l := range strings.Lines(strings.Join(out, "")) {
		if framing(l) || strings.HasPrefix(strings.TrimSpace(l), "--- ") {
			continue
		}
		t := strings.TrimSpace(l)
		switch {
		case logged(l):
			last = []string{t}
		case last != nil && t != "" && (l[0] == ' ' || l[0] == '\t'):
			last = append(last, t) // indented: the message goes on
		case t != "":
			parts = append(parts, t)
		}
	}
	if last != nil {
		return strings.Join(last, " ")
	}
	return strings.Join(parts, " ")
}

// logged reports whether l starts a message of t.Log or t.Skip: an indented
// "file.go:line: ".
func logged(l string) bool {
	t := strings.TrimLeft(l, " ")
	if len(t) == len(l) {
		return false
	}
	file, rest, ok := strings.Cut(t, ":")
	if !ok || !strings.HasSuffix(file, ".go") {
		return false
	}
	n, _, ok := strings.Cut(rest, ": ")
	return ok && n != "" && strings.Trim(n, "0123456789") == ""
}

// framing reports whether l is a line of go test -v's own (=== RUN, PAUSE,
// CONT, NAME), which go test without -v does not print.
func framing(l string) bool { return strings.HasPrefix(l, "=== ") }

// flush prints a finished package as go test without -v would (its own
// lines, and the output of its failed and unfinished tests), except that
// the output of those tests keeps go test -v's lines naming the test that
// runs (=== RUN, CONT, NAME): parallel tests interleave.
func (r *report) flush(name string, p *pkgState, action string) {
	if p.done {
		return
	}
	p.done = true
	for _, l := range p.lines {
		if strings.HasPrefix(l.text, "=== PAUSE") || l.test == "" && framing(l.text) {
			continue
		}
		if l.test == "" {
			if action != "fail" && l.text == "PASS\n" {
				continue
			}
			_, _ = io.WriteString(r.w, l.text)
			continue
		}
		if action != "fail" {
			continue
		}
		switch p.result[l.test] {
		case "fail", "":
			_, _ = io.WriteString(r.w, l.text)
		}
	}
	p.lines, p.byTest = nil, nil
}

// finish prints what no package printed (the output stopped), the
// conformance summary and the skips, and returns the exit status: code (the
// command's), else 1 for a disallowed skip under ci.
func (r *report) finish(code int, ci bool) int {
	for _, name := range r.pkgOrder {
		if p := r.pkgs[name]; !p.done {
			fmt.Fprintf(r.w, "testreport: %s did not finish; its output:\n", name)
			r.flush(name, p, "fail")
		}
	}
	if len(r.harnesses) == 0 && len(r.skips) == 0 {
		return code
	}
	names := make([]string, 0, len(r.harnesses))
	width := len("harness")
	for h := range r.harnesses {
		names = append(names, h)
		width = max(width, len(h))
	}
	slices.Sort(names)
	fmt.Fprintf(r.w, "\nconformance cases per harness:\n")
	fmt.Fprintf(r.w, "  %-*s %6s %6s %6s %7s\n", width, "harness", "run", "passed", "failed", "skipped")
	var total counts
	for _, h := range names {
		c := r.harnesses[h]
		fmt.Fprintf(r.w, "  %-*s %6d %6d %6d %7d\n", width, h, c.passed+c.failed+c.skipped, c.passed, c.failed, c.skipped)
		total.passed += c.passed
		total.failed += c.failed
		total.skipped += c.skipped
	}
	fmt.Fprintf(r.w, "  %-*s %6d %6d %6d %7d\n", width, "total", total.passed+total.failed+total.skipped, total.passed, total.failed, total.skipped)

	var bad []skip
	for _, s := range r.skips {
		if s.allowed == nil {
			bad = append(bad, s)
		}
	}
	if n := len(r.skips) - len(bad); n > 0 {
		fmt.Fprintf(r.w, "allowed skips (documented properties of the backend): %d\n", n)
		for i := range r.allowed {
			var which []string
			for _, s := range r.skips {
				if s.allowed == &r.allowed[i] {
					which = append(which, s.harness+"/"+s.caseName)
				}
			}
			if len(which) > 0 {
				fmt.Fprintf(r.w, "  %s (%d): %s\n", strings.Join(slices.Compact(caseNames(which)), ", "), len(which), r.allowed[i].reason)
			}
		}
	}
	if len(bad) == 0 {
		return code
	}
	if ci {
		fmt.Fprintf(r.w, "FAIL: %d conformance skips are not documented properties of their backends (CI is true):\n", len(bad))
	} else {
		fmt.Fprintf(r.w, "%d conformance skips are not documented properties of their backends (they fail under CI=true):\n", len(bad))
	}
	for _, s := range bad {
		what := s.harness
		if s.caseName != "" {
			what += "/" + s.caseName
		}
		fmt.Fprintf(r.w, "  %s: %s\n", what, s.message)
	}
	if ci {
		return max(code, 1)
	}
	return code
}

// caseNames returns the case names of harness/case paths.
func caseNames(paths []string) []string {
	names := make([]string, len(paths))
	for i, p := range paths {
		names[i] = p[strings.LastIndex(p, "/")+1:]
	}
	slices.Sort(names)
	return names
}
