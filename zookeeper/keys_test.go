package zookeeper

import (
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/go-zookeeper/zk"

	"github.com/golocker/locker/internal/storeenv"
)

var trickyKeys = []string{
	"plain", "a/b", "/", "//", "a/", ".", "..", "...", "./a", "a/..", "%", "%25", "%2F", "a%2Fb",
	" ", "with spaces ", "\x00", "nul\x00", "\t\n\r", "\x7f", "\u0080\u009f", "\u00a0é",
	"ключ", "鍵", "🔒", "\U0010FFFF", "\uD7FF", "\uE000", "\uF8FF", "\uF900", "\uFFEF", "\uFFF0", "\uFFFD", "\uFFFF",
	"\xff", "\xc3", "a\xffb", "zookeeper", "_c_abc-lock-0000000001", "*?[]{}#'\"\\",
	strings.Repeat("k", 4096), strings.Repeat("%/", 2048),
}

func TestEscapeRoundTrip(t *testing.T) {
	seen := map[string]string{}
	for _, k := range trickyKeys {
		name := escapeKey(k)
		back, err := unescapeKey(name)
		if err != nil || back != k {
			t.Errorf("unescape(escape(%q)) = %q, %v", k, back, err)
		}
		if other, dup := seen[name]; dup {
			t.Errorf("keys %q and %q map to the same name %q", other, k, name)
		}
		seen[name] = k
		if err := validName(name); err != nil {
			t.Errorf("escape(%q) = %q: %v", k, name, err)
		}
	}
}

// validName checks a znode name against ZooKeeper's rules (PathUtils), in
// UTF-16 code units as the server does.
func validName(name string) error {
	if name == "" || name == "." || name == ".." || strings.Contains(name, "/") || !utf8.ValidString(name) {
		return errName
	}
	for _, r := range name {
		if r == 0 || r > 0xFFFF || r < 0x20 || (r >= 0x7F && r <= 0x9F) || (r >= 0xD800 && r <= 0xF8FF) || r >= 0xFFF0 {
			return errName
		}
	}
	return nil
}

var errName = errorString("not a valid znode name")

type errorString string

func (e errorString) Error() string { return string(e) }

func FuzzEscape(f *testing.F) {
	for _, k := range trickyKeys {
		f.Add(k)
	}
	f.Fuzz(func(t *testing.T, k string) {
		name := escapeKey(k)
		back, err := unescapeKey(name)
		if err != nil || back != k {
			t.Fatalf("unescape(escape(%q)) = %q, %v", k, back, err)
		}
		if k != "" {
			if err := validName(name); err != nil {
				t.Fatalf("escape(%q) = %q: %v", k, name, err)
			}
		}
		if len(name) > 3*len(k) {
			t.Fatalf("escape(%q) is %d bytes, more than three times the key", k, len(name))
		}
	})
}

func TestUnescapeRejectsMalformed(t *testing.T) {
	for _, s := range []string{"%", "%2", "%zz", "a%2", "%2f"} {
		if _, err := unescapeKey(s); err == nil {
			t.Errorf("unescapeKey(%q) succeeded", s)
		}
	}
}

// The escaped names are accepted by a real server, as distinct nodes.
func TestEscapedNamesOnServer(t *testing.T) {
	srv := storeenv.ZooKeeper(t)
	conn, _, err := zk.Connect(srv.Addrs(), 2*time.Second, zk.WithLogInfo(false), zk.WithLogger(nopLogger{}))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	parent := "/escape-test-" + newGUID()
	if _, err := conn.Create(parent, nil, 0, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatal(err)
	}
	for _, k := range trickyKeys {
		if _, err := conn.Create(parent+"/"+escapeKey(k), nil, zk.FlagEphemeral, zk.WorldACL(zk.PermAll)); err != nil {
			t.Errorf("create the node of key %.40q: %v", k, err)
		}
	}
	children, _, err := conn.Children(parent)
	if err != nil {
		t.Fatal(err)
	}
	if len(children) != len(trickyKeys) {
		t.Errorf("%d distinct nodes for %d keys", len(children), len(trickyKeys))
	}
	for _, c := range children {
		if _, err := unescapeKey(c); err != nil {
			t.Errorf("the server changed a name: %q", c)
		}
		_ = conn.Delete(parent+"/"+c, -1)
	}
	_ = conn.Delete(parent, -1)
}

type nopLogger struct{}

func (nopLogger) Printf(string, ...any) {}

func TestValidateRoot(t *testing.T) {
	for _, ok := range []string{"/locker", "/a/b/c", "/my app/locks", "/ключ"} {
		if err := validateRoot(ok); err != nil {
			t.Errorf("validateRoot(%q) = %v", ok, err)
		}
	}
	if got := ancestors("/a/b/c"); strings.Join(got, ",") != "/a,/a/b,/a/b/c" {
		t.Errorf("ancestors = %v", got)
	}
}

func TestSequenceOrder(t *testing.T) {
	g := strings.Repeat("a", guidLen)
	name := func(seq string) string { return protectedPrefix + g + lockMarker + seq }
	children := []string{name("0000000003"), name("0000000010"), "foreign", name("0000000007"), protectedPrefix + "x" + lockMarker + "junk"}
	want := line{found: true, ahead: 2, pred: name("0000000007"), pp: name("0000000003")}
	if got := lineOf(children, name("0000000010"), 10); got != want {
		t.Errorf("lineOf 10 = %+v, want %+v", got, want)
	}
	// The order of the listing does not matter.
	slices.Reverse(children)
	if got := lineOf(children, name("0000000010"), 10); got != want {
		t.Errorf("lineOf 10, listed the other way = %+v, want %+v", got, want)
	}
	want = line{found: true, ahead: 1, pred: name("0000000003")}
	if got := lineOf(children, name("0000000007"), 7); got != want {
		t.Errorf("lineOf 7 = %+v, want %+v", got, want)
	}
	if got := lineOf(children, name("0000000003"), 3); got != (line{found: true}) {
		t.Errorf("lineOf the first = %+v", got)
	}
	if lineOf(children, name("0000000004"), 4).found {
		t.Error("a node not in the queue was found")
	}
	if got := guidOf(name("0000000003")); got != g {
		t.Errorf("guidOf = %q", got)
	}
}
