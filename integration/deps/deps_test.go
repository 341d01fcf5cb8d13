// Package deps checks the dependency graph a user gets: for each backend, a
// throw-away module that imports only locker and that backend must have the
// module graph of the store's client alone plus locker's own two modules,
// and its go.sum must not mention the test infrastructure or another
// backend's client. A redis-only program opened by URL must link no other
// client and stay within 10% of the size of one that calls redis.New.
//
// The modules are built with the go command on this machine (GOWORK=off, the
// repository's modules replaced by their directories, everything else from
// the module proxy or its cache).
package deps

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
)

// root is the directory of the repository.
var root = func() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}()

const module = "github.com/golocker/locker"

// Who must never appear in a user's go.sum, by name.
var (
	testInfra = []string{"testcontainers", "docker", "moby"}
	clients   = map[string]string{
		"redis":     "github.com/redis/go-redis",
		"mysql":     "gorm.io/",
		"postgres":  "github.com/jackc/pgx",
		"etcd":      "go.etcd.io/etcd",
		"zookeeper": "github.com/go-zookeeper/zk",
	}
)

// budget is one row of the README's table.
type budget struct {
	backend string   // "" for the core alone
	imports []string // what the user's program imports
	alone   []string // the store client's packages, imported alone
	forbid  []string // go.sum must not mention these either
}

var budgets = []budget{
	{backend: "", imports: []string{module, module + "/memory", module + "/conformance"}},
	{backend: "redis", imports: []string{module, module + "/redis"}, alone: []string{"github.com/redis/go-redis/v9"}},
	{backend: "etcd", imports: []string{module, module + "/etcd"}, alone: []string{"go.etcd.io/etcd/client/v3"}, forbid: []string{"go.etcd.io/etcd/server"}},
	{backend: "mysql", imports: []string{module, module + "/mysql"}, alone: []string{"gorm.io/gorm", "gorm.io/driver/mysql"}},
	{backend: "postgres", imports: []string{module, module + "/postgres"}, alone: []string{"github.com/jackc/pgx/v5/pgxpool", "github.com/jackc/pgx/v5/stdlib"}},
	{backend: "zookeeper", imports: []string{module, module + "/zookeeper"}, alone: []string{"github.com/go-zookeeper/zk"}},
}

// TestModuleGraphBudgets builds the user's module and the client-alone
// module of every row, in the same run, and compares them.
func TestModuleGraphBudgets(t *testing.T) {
	if testing.Short() {
		t.Skip("builds throw-away modules")
	}
	for _, b := range budgets {
		name := b.backend
		if name == "" {
			name = "core"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			user := newModule(t, "example.com/user", b.backend, program(b.imports, ""))
			got := user.modules(t)
			want := 2 // the user's module and locker
			if b.backend != "" {
				alone := newModule(t, "example.com/alone", "", program(b.alone, ""))
				alone.requireVersionsOf(t, b.backend)
				want = len(alone.modules(t)) + 2
				t.Logf("%s: %d modules (client alone: %d)", name, len(got), want-2)
			} else {
				t.Logf("%s: %d modules", name, len(got))
			}
			if len(got) != want {
				t.Errorf("go list -m all lists %d modules; the budget is %d:\n%s", len(got), want, strings.Join(got, "\n"))
			}
			sum := user.goSum(t)
			forbidden := append(append([]string(nil), testInfra...), b.forbid...)
			for backend, client := range clients {
				if backend != b.backend {
					forbidden = append(forbidden, client)
				}
			}
			if b.backend == "" && strings.TrimSpace(sum) != "" {
				t.Errorf("go.sum of a program importing only the core is not empty:\n%s", sum)
			}
			for _, f := range forbidden {
				for _, line := range strings.Split(sum, "\n") {
					if strings.Contains(line, f) {
						t.Errorf("go.sum mentions %q: %s", f, line)
						break
					}
				}
			}
		})
	}
}

// TestURLOpenedBinary builds a program that opens its Redis Locker from a
// URL (registering only redis.Open) and one that calls redis.New: the first
// links no other backend's client and is within 10% of the second's size.
func TestURLOpenedBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds two programs")
	}
	byURL := newModule(t, "example.com/byurl", "redis", program([]string{module, module + "/redis"}, `
	var mux locker.Mux
	if err := mux.Register("redis", redis.Open); err != nil {
		panic(err)
	}
	l, err := locker.Open(context.Background(), &mux, os.Getenv("LOCK_URL"))
	if err == nil {
		_ = l.Close()
	}`))
	direct := newModule(t, "example.com/direct", "redis", program([]string{module, module + "/redis", "github.com/redis/go-redis/v9"}, `
	var l locker.Locker
	l, err := redis.New(goredis.NewClient(&goredis.Options{Addr: os.Getenv("REDIS_ADDR")}))
	if err == nil {
		_ = l.Close()
	}`))
	var wg sync.WaitGroup
	var urlBin, directBin string
	wg.Go(func() { urlBin = byURL.build(t) })
	wg.Go(func() { directBin = direct.build(t) })
	wg.Wait()
	if t.Failed() {
		return
	}
	deps := goCmd(t, byURL.dir, "version", "-m", urlBin)
	for backend, client := range clients {
		if backend != "redis" && strings.Contains(deps, client) {
			t.Errorf("the URL-opened redis program links %s:\n%s", client, deps)
		}
	}
	// Module paths only: a replacement's directory (the checkout's path)
	// may contain any word.
	for _, line := range strings.Split(deps, "\n") {
		f := strings.Fields(line)
		if len(f) < 2 || (f[0] != "dep" && f[0] != "mod") {
			continue
		}
		for _, infra := range testInfra {
			if strings.Contains(f[1], infra) {
				t.Errorf("the URL-opened redis program links %s (%s)", infra, f[1])
			}
		}
	}
	us, ds := fileSize(t, urlBin), fileSize(t, directBin)
	t.Logf("redis program by URL: %d bytes; with redis.New: %d bytes (%.3f×)", us, ds, float64(us)/float64(ds))
	if float64(us) > 1.10*float64(ds) {
		t.Errorf("the URL-opened program is %d bytes, more than 10%% above redis.New's %d", us, ds)
	}
}

// program returns a main package importing imports and running body; an
// empty body only uses the imports.
func program(imports []string, body string) string {
	var b strings.Builder
	b.WriteString("package main\n\nimport (\n")
	if body != "" {
		b.WriteString("\t\"context\"\n\t\"os\"\n")
	}
	for _, p := range imports {
		switch {
		case p == "github.com/redis/go-redis/v9" && body != "":
			fmt.Fprintf(&b, "\tgoredis %q\n", p)
		case body != "":
			fmt.Fprintf(&b, "\t%q\n", p)
		default:
			fmt.Fprintf(&b, "\t_ %q\n", p)
		}
	}
	b.WriteString(")\n\nfunc main() {")
	b.WriteString(body)
	b.WriteString("\n}\n")
	if body != "" {
		// A body that does not need context keeps compiling.
		b.WriteString("\nvar _ = context.Background\n")
	}
	return b.String()
}

// userModule is a throw-away module in a temporary directory.
type userModule struct{ dir string }

// newModule writes module path with main.go src. The repository's modules
// are replaced by their directories: the root, and backend's when not "".
func newModule(t *testing.T, path, backend, src string) *userModule {
	t.Helper()
	dir := t.TempDir()
	var mod strings.Builder
	fmt.Fprintf(&mod, "module %s\n\ngo 1.26\n", path)
	if strings.Contains(src, module) {
		fmt.Fprintf(&mod, "\nrequire %s v0.1.0\n\nreplace %s => %s\n", module, module, root)
		if backend != "" {
			fmt.Fprintf(&mod, "\nrequire %s/%s v0.1.0\n\nreplace %s/%s => %s\n", module, backend, module, backend, filepath.Join(root, backend))
		}
	}
	write(t, filepath.Join(dir, "go.mod"), mod.String())
	write(t, filepath.Join(dir, "main.go"), src)
	m := &userModule{dir: dir}
	return m
}

// requireVersionsOf pins the modules that backend's go.mod requires
// directly, so that the client alone is measured at the versions locker
// uses.
func (m *userModule) requireVersionsOf(t *testing.T, backend string) {
	t.Helper()
	var mod struct {
		Require []struct {
			Path     string
			Version  string
			Indirect bool
		}
	}
	if err := json.Unmarshal([]byte(goCmd(t, filepath.Join(root, backend), "mod", "edit", "-json")), &mod); err != nil {
		t.Fatal(err)
	}
	for _, r := range mod.Require {
		if !r.Indirect && !strings.HasPrefix(r.Path, module) {
			goCmd(t, m.dir, "mod", "edit", "-require="+r.Path+"@"+r.Version)
		}
	}
}

// modules tidies the module and returns `go list -m all`.
func (m *userModule) modules(t *testing.T) []string {
	t.Helper()
	goCmd(t, m.dir, "mod", "tidy")
	return strings.Fields(strings.ReplaceAll(goCmd(t, m.dir, "list", "-m", "-f", "{{.Path}}", "all"), "\n", " "))
}

// goSum returns the module's go.sum ("" when there is none).
func (m *userModule) goSum(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(m.dir, "go.sum"))
	if os.IsNotExist(err) {
		return ""
	}
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// build tidies and builds the module's program, returning its path.
func (m *userModule) build(t *testing.T) string {
	t.Helper()
	goCmd(t, m.dir, "mod", "tidy")
	bin := filepath.Join(m.dir, "prog")
	goCmd(t, m.dir, "build", "-trimpath", "-o", bin, ".")
	return bin
}

// goCmd runs the go command in dir, outside the repository's workspace,
// and returns its standard output; it fails t on an error.
func goCmd(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod", "CGO_ENABLED=0")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("go %s (in %s): %v\n%s", strings.Join(args, " "), dir, err, errb.String())
	}
	return out.String()
}

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func fileSize(t *testing.T, path string) int64 {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}
