package main

import (
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"testing"
)

const pkg = modulePrefix + "integration/fake"

// stream builds go test -json output: each event is action, test, output.
func stream(t *testing.T, events ...[3]string) string {
	t.Helper()
	var b strings.Builder
	for _, e := range events {
		line, err := json.Marshal(event{Action: e[0], Package: pkg, Test: e[1], Output: e[2]})
		if err != nil {
			t.Fatal(err)
		}
		b.Write(line)
		b.WriteByte('\n')
	}
	return b.String()
}

// caseEvents are the events of one conformance case that ends with action
// after printing out.
func caseEvents(harness, name, action, out string) [][3]string {
	test := harness + "/" + name
	return [][3]string{
		{"run", test, ""},
		{"output", test, "=== RUN   " + test + "\n"},
		{"output", test, out},
		{"output", test, "--- " + strings.ToUpper(action) + ": " + test + " (0.00s)\n"},
		{action, test, ""},
	}
}

// suite is a package run of harness TestConformanceFake with cases A (pass)
// and B, which ends with action after printing out.
func suite(t *testing.T, action, out string) string {
	var ev [][3]string
	ev = append(ev, [3]string{"run", "TestConformanceFake", ""})
	ev = append(ev, caseEvents("TestConformanceFake", "A", "pass", "    a.go:1: a passing case's log\n")...)
	ev = append(ev, caseEvents("TestConformanceFake", "B", action, out)...)
	if action == "fail" {
		ev = append(ev,
			[3]string{"output", "TestConformanceFake", "--- FAIL: TestConformanceFake (0.00s)\n"},
			[3]string{"fail", "TestConformanceFake", ""},
			[3]string{"output", "", "FAIL\n"},
			[3]string{"output", "", "FAIL\t" + pkg + "\t1.0s\n"},
			[3]string{"fail", "", ""})
		return stream(t, ev...)
	}
	ev = append(ev,
		[3]string{"pass", "TestConformanceFake", ""},
		[3]string{"output", "", "PASS\n"},
		[3]string{"output", "", "ok  \t" + pkg + "\t1.0s\n"},
		[3]string{"pass", "", ""})
	return stream(t, ev...)
}

func runReport(t *testing.T, in string, code int, ci bool, allowed []allowance) (string, int) {
	t.Helper()
	var out strings.Builder
	r := newReport(&out, []string{"A", "B"}, allowed)
	if err := r.read(strings.NewReader(in)); err != nil {
		t.Fatal(err)
	}
	code = r.finish(code, ci)
	return out.String(), code
}

func TestSkipForWantOfAHookFailsUnderCI(t *testing.T) {
	in := suite(t, "skip", "    b.go:8: a log line\n    b.go:9: Harness.Restart is nil: the harness cannot restart the store\n"+
		"        and a second line\nredis: a client's own log\n")
	for _, ci := range []bool{true, false} {
		out, code := runReport(t, in, 0, ci, nil)
		if want := map[bool]int{true: 1, false: 0}[ci]; code != want {
			t.Errorf("CI=%v: a case skipped for want of a hook: exit %d; want %d\n%s", ci, code, want, out)
		}
		if !strings.Contains(out, "integration/fake TestConformanceFake/B: b.go:9: Harness.Restart is nil: the harness cannot restart the store and a second line\n") {
			t.Errorf("CI=%v: the report does not name the skipped case and its message:\n%s", ci, out)
		}
		if !strings.Contains(out, "integration/fake TestConformanceFake      2      1      0       1") {
			t.Errorf("CI=%v: the report does not count 2 cases run, 1 passed, 1 skipped:\n%s", ci, out)
		}
	}
}

func TestAllowedSkipPassesUnderCI(t *testing.T) {
	in := suite(t, "skip", "    b.go:9: the backend refuses TTL: invalid option\n")
	allowed := []allowance{{harnesses: []string{"integration/fake TestConformanceFake"}, cases: []string{"B"},
		message: "the backend refuses TTL", reason: "a documented property"}}
	out, code := runReport(t, in, 0, true, allowed)
	if code != 0 {
		t.Errorf("an allowed skip under CI: exit %d; want 0\n%s", code, out)
	}
	if !strings.Contains(out, "B (1): a documented property") {
		t.Errorf("the report does not give the allowed skip's reason:\n%s", out)
	}
	// The same case skipping for another reason is not allowed.
	in = suite(t, "skip", "    b.go:9: Harness.Restart is nil\n")
	if out, code := runReport(t, in, 0, true, allowed); code != 1 {
		t.Errorf("a skip of an allowed case with another message under CI: exit %d; want 1\n%s", code, out)
	}
}

func TestSkippedHarnessFailsUnderCI(t *testing.T) {
	in := stream(t,
		[3]string{"run", "TestConformanceFake", ""},
		[3]string{"output", "TestConformanceFake", "    h.go:3: testenv: redis unavailable\n"},
		[3]string{"skip", "TestConformanceFake", ""},
		[3]string{"pass", "", ""})
	if out, code := runReport(t, in, 0, true, nil); code != 1 || !strings.Contains(out, "TestConformanceFake: h.go:3: testenv: redis unavailable") {
		t.Errorf("a skipped harness under CI: exit %d; want 1 and the message\n%s", code, out)
	}
}

func TestFailurePrintsLikeGoTest(t *testing.T) {
	out, code := runReport(t, suite(t, "fail", "    b.go:9: two holders at once\n"), 1, false, nil)
	if code != 1 {
		t.Errorf("a failed test: exit %d; want 1", code)
	}
	for _, want := range []string{"=== RUN   TestConformanceFake/B\n    b.go:9: two holders at once\n--- FAIL: TestConformanceFake/B (0.00s)\n--- FAIL: TestConformanceFake (0.00s)\nFAIL\nFAIL\t" + pkg} {
		if !strings.Contains(out, want) {
			t.Errorf("the report does not print %q:\n%s", want, out)
		}
	}
	for _, unwanted := range []string{"=== RUN   TestConformanceFake/A", "a passing case's log"} {
		if strings.Contains(out, unwanted) {
			t.Errorf("the report prints %q, which go test without -v does not:\n%s", unwanted, out)
		}
	}
}

func TestPassPrintsOK(t *testing.T) {
	out, code := runReport(t, suite(t, "pass", ""), 0, true, nil)
	if code != 0 || !strings.HasPrefix(out, "ok  \t"+pkg) || strings.Contains(out, "PASS\n") {
		t.Errorf("a passing package: exit %d, output:\n%s\nwant exit 0 and only the ok line before the summary", code, out)
	}
}

func TestBuildFailure(t *testing.T) {
	in := `{"ImportPath":"x [x.test]","Action":"build-output","Output":"x/x_test.go:3:1: syntax error\n"}
{"ImportPath":"x [x.test]","Action":"build-fail"}
{"Action":"start","Package":"x"}
{"Action":"output","Package":"x","Output":"FAIL\tx [build failed]\n"}
{"Action":"fail","Package":"x","FailedBuild":"x [x.test]"}
`
	var out strings.Builder
	code := run(nil, strings.NewReader(in), &out, &out)
	if code != 1 || !strings.Contains(out.String(), "syntax error") || !strings.Contains(out.String(), "[build failed]") {
		t.Errorf("a build failure: exit %d, output:\n%s\nwant exit 1 with the compiler's message", code, out.String())
	}
}

// TestCommandExitStatus runs a command whose output is a passing package
// and whose exit status is not 0: the status wins.
func TestCommandExitStatus(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh")
	}
	in := suite(t, "pass", "")
	var out strings.Builder
	code := run([]string{sh, "-c", fmt.Sprintf("cat <<'EOF'\n%sEOF\nexit 3", in)}, strings.NewReader(""), &out, &out)
	if code != 3 {
		t.Errorf("a command that exits 3: exit %d; want 3\n%s", code, out.String())
	}
	if !strings.Contains(out.String(), "ok  \t"+pkg) {
		t.Errorf("the command's output was not reported:\n%s", out.String())
	}
}
