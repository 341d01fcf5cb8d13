package conformance

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// docCaseNames returns the case names the package doc's "# Cases" list
// gives, in its order: the names before the colon of each item, without
// their parenthesized hooks ("FencingAfterCrash (Crash), FencingAfterRestart
// (Restart): …" names two).
func docCaseNames(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	var doc string
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		af, err := parser.ParseFile(token.NewFileSet(), f, src, parser.PackageClauseOnly|parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		if af.Doc != nil {
			doc += af.Doc.Text()
		}
	}
	_, list, ok := strings.Cut(doc, "\n# Cases\n")
	if !ok {
		t.Fatal(`the package doc has no "# Cases" section`)
	}
	list, _, _ = strings.Cut(list, "\n# ")
	item := regexp.MustCompile(`(?m)^  - ([^:]*):`)
	hooks := regexp.MustCompile(`\s*\([^)]*\)`)
	var names []string
	for _, m := range item.FindAllStringSubmatch(list, -1) {
		for n := range strings.SplitSeq(hooks.ReplaceAllString(m[1], ""), ",") {
			names = append(names, strings.TrimSpace(n))
		}
	}
	return names
}

// TestCasesMatchDoc checks that the package doc lists every case of
// cases, and no other, and that every case states its contract.
func TestCasesMatchDoc(t *testing.T) {
	documented := docCaseNames(t)
	for _, name := range documented {
		if !slices.Contains(Cases(), name) {
			t.Errorf("the package doc's case list names %q, which is not in cases", name)
		}
	}
	for _, tc := range cases {
		if !slices.Contains(documented, tc.name) {
			t.Errorf("case %q is missing from the package doc's case list (# Cases in the package doc)", tc.name)
		}
		if strings.TrimSpace(tc.contract) == "" {
			t.Errorf("case %q has no contract: give its testCase the contract its failure messages quote", tc.name)
		}
	}
	if t.Failed() {
		t.Logf("documented: %v", documented)
	}
}
