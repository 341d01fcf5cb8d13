package locker_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestDocSnippets holds the README and docs/ to their rule: every Go
// snippet comes from an Example or a test, so that it runs. A ```go block
// follows a line <!-- snippet: FILE FUNC -->, and its lines appear in that
// order in the body of function FUNC of FILE (relative to the repository
// root; blank lines and indentation aside).
func TestDocSnippets(t *testing.T) {
	docs, err := filepath.Glob("docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, doc := range append([]string{"README.md"}, docs...) {
		text, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range goSnippets(string(text)) {
			if s.file == "" {
				t.Errorf("%s:%d: a Go snippet without a <!-- snippet: FILE FUNC --> line before it: it must come from an Example or a test", doc, s.line)
				continue
			}
			body, err := funcBody(s.file, s.fn)
			if err != nil {
				t.Errorf("%s:%d: %v", doc, s.line, err)
				continue
			}
			if missing := notInOrder(s.code, body); missing != "" {
				t.Errorf("%s:%d: the snippet drifted from %s in %s: %q is not there, or not in that order", doc, s.line, s.fn, s.file, missing)
			}
		}
	}
}

type snippet struct {
	line     int // of the opening fence, 1-based
	file, fn string
	code     []string
}

// goSnippets returns the ```go blocks of a Markdown text, each with the
// snippet marker of the line before it, if any.
func goSnippets(text string) []snippet {
	var (
		out    []snippet
		cur    *snippet
		marker string
	)
	for i, line := range strings.Split(text, "\n") {
		switch {
		case cur != nil && strings.TrimSpace(line) == "```":
			out = append(out, *cur)
			cur = nil
		case cur != nil:
			cur.code = append(cur.code, line)
		case strings.TrimSpace(line) == "```go":
			cur = &snippet{line: i + 1}
			if f := strings.Fields(marker); len(f) == 2 {
				cur.file, cur.fn = f[0], f[1]
			}
		}
		if m, ok := strings.CutPrefix(strings.TrimSpace(line), "<!-- snippet:"); ok {
			marker = strings.TrimSuffix(strings.TrimSpace(m), "-->")
		} else if strings.TrimSpace(line) != "" {
			marker = ""
		}
	}
	return out
}

// funcBody returns the source lines of the body of function fn in file.
func funcBody(file, fn string) ([]string, error) {
	src, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, file, src, parser.ParseComments)
	if err != nil {
		return nil, err
	}
	for _, d := range f.Decls {
		if fd, ok := d.(*ast.FuncDecl); ok && fd.Name.Name == fn && fd.Body != nil {
			start, end := fset.Position(fd.Body.Pos()).Offset, fset.Position(fd.Body.End()).Offset
			return strings.Split(string(src[start:end]), "\n"), nil
		}
	}
	return nil, &os.PathError{Op: "find func " + fn, Path: file, Err: os.ErrNotExist}
}

// notInOrder returns the first non-blank line of code that does not occur
// in body after the previous one's match, or "" when all do.
func notInOrder(code, body []string) string {
	j := 0
	for _, c := range code {
		c = strings.TrimSpace(c)
		if c == "" {
			continue
		}
		for j < len(body) && strings.TrimSpace(body[j]) != c {
			j++
		}
		if j == len(body) {
			return c
		}
		j++
	}
	return ""
}
