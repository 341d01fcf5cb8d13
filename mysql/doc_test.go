package mysql_test

import (
	"os"
	"strings"
	"testing"

	"github.com/golocker/locker/mysql"
)

// TestDocShowsTheDDL: the DDL in the package doc (and so the README) has the
// columns and types New creates.
func TestDocShowsTheDDL(t *testing.T) {
	src, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	columns := func(ddl string) []string {
		var cols []string
		for _, line := range strings.Split(ddl, "\n") {
			line = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(line), "//"))
			if !strings.HasPrefix(line, "`") {
				continue
			}
			f := strings.Fields(line)
			if len(f) < 3 {
				continue
			}
			null := "NULL"
			if f[2] == "NOT" || len(f) > 3 && f[3] == "NOT" {
				null = "NOT NULL"
			}
			if f[1] == "BIGINT" {
				f[1] += " " + f[2]
			}
			cols = append(cols, f[0]+" "+f[1]+" "+null)
		}
		return cols
	}
	doc := columns(string(src))
	code := columns(mysql.CreateTableSQL(mysql.DefaultTable))
	if len(code) != 10 || strings.Join(doc, "\n") != strings.Join(code, "\n") {
		t.Errorf("the package doc's DDL columns\n%s\ndiffer from New's\n%s", strings.Join(doc, "\n"), strings.Join(code, "\n"))
	}
}
