package zookeeper

import (
	"errors"
	"fmt"
	"path"
	"strings"
	"unicode/utf8"
)

// QueuePath returns the node under which the queue of store key key (the
// caller's key with the Locker's prefix) lives, for a Locker whose root node
// is root: each contender's ephemeral sequential node is a child of it. For
// operators who inspect the queue (zkCli.sh ls).
func QueuePath(root, key string) string { return root + "/" + escapeKey(key) }

// escapeKey maps a store key (any string) to one znode name, injectively:
// every byte sequence that ZooKeeper does not accept in a name, and '%'
// itself, is percent-encoded byte by byte (%XX, upper-case hex), and the
// names "." and ".." become "%2E" and "%2E%2E". What stays is valid UTF-8
// that ZooKeeper's PathUtils accepts.
//
// ZooKeeper checks names in UTF-16 code units: U+0000–U+001F, U+007F–U+009F,
// U+D800–U+F8FF and U+FFF0–U+FFFF are refused, and so is every rune above
// U+FFFF (Java stores it as a surrogate pair, inside the refused range).
func escapeKey(key string) string {
	if plainKey(key) {
		return key
	}
	var b strings.Builder
	b.Grow(len(key))
	for i := 0; i < len(key); {
		r, w := utf8.DecodeRuneInString(key[i:])
		if keepRune(r, w) {
			b.WriteString(key[i : i+w])
		} else {
			for j := i; j < i+w; j++ {
				fmt.Fprintf(&b, "%%%02X", key[j])
			}
		}
		i += w
	}
	switch s := b.String(); s {
	case ".":
		return "%2E"
	case "..":
		return "%2E%2E"
	default:
		return s
	}
}

// plainKey reports whether escapeKey leaves key as it is for want of any
// byte to escape: printable ASCII other than '%' and '/', and not "." or
// "..". Others may still be left as they are.
func plainKey(key string) bool {
	if key == "." || key == ".." {
		return false
	}
	for i := 0; i < len(key); i++ {
		if c := key[i]; c < 0x20 || c >= 0x7F || c == '%' || c == '/' {
			return false
		}
	}
	return true
}

// keepRune reports whether rune r, encoded in w bytes, may appear as is in a
// znode name.
func keepRune(r rune, w int) bool {
	switch {
	case r == utf8.RuneError && w == 1: // a byte that is not UTF-8
		return false
	case r == '%', r == '/':
		return false
	case r < 0x20, r >= 0x7F && r <= 0x9F:
		return false
	case r >= 0xD800 && r <= 0xF8FF:
		return false
	case r >= 0xFFF0: // U+FFF0–U+FFFF and everything beyond the BMP
		return false
	}
	return true
}

// errBadEscape is returned by unescapeKey for a name escapeKey cannot have
// produced.
var errBadEscape = errors.New("zookeeper: malformed escaped key")

// unescapeKey is the inverse of escapeKey.
func unescapeKey(name string) (string, error) {
	if !strings.Contains(name, "%") {
		return name, nil
	}
	var b strings.Builder
	b.Grow(len(name))
	for i := 0; i < len(name); i++ {
		c := name[i]
		if c != '%' {
			b.WriteByte(c)
			continue
		}
		if i+2 >= len(name) {
			return "", fmt.Errorf("%w: %q", errBadEscape, name)
		}
		hi, ok1 := unhex(name[i+1])
		lo, ok2 := unhex(name[i+2])
		if !ok1 || !ok2 {
			return "", fmt.Errorf("%w: %q", errBadEscape, name)
		}
		b.WriteByte(hi<<4 | lo)
		i += 2
	}
	return b.String(), nil
}

func unhex(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'A' && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// validateRoot checks a Config.Root: an absolute znode path below "/", in
// canonical form, outside ZooKeeper's own /zookeeper tree, whose names are
// acceptable to ZooKeeper as they are.
func validateRoot(root string) error {
	switch {
	case !strings.HasPrefix(root, "/"):
		return fmt.Errorf("root %q is not an absolute path", root)
	case root == "/":
		return errors.New(`root "/" is not allowed: give the locks a node of their own, such as /locker`)
	case path.Clean(root) != root:
		return fmt.Errorf("root %q is not in canonical form (want %q)", root, path.Clean(root))
	case root == "/zookeeper" || strings.HasPrefix(root, "/zookeeper/"):
		return fmt.Errorf("root %q is inside ZooKeeper's reserved /zookeeper tree", root)
	}
	for _, name := range strings.Split(root[1:], "/") {
		if escapeKey(name) != name {
			return fmt.Errorf("root %q: the name %q has characters ZooKeeper does not accept (or %%)", root, name)
		}
	}
	return nil
}

// ancestors returns the paths from the first level down to p itself:
// "/a/b/c" gives "/a", "/a/b", "/a/b/c".
func ancestors(p string) []string {
	var out []string
	for i := 1; i < len(p); i++ {
		if p[i] == '/' {
			out = append(out, p[:i])
		}
	}
	return append(out, p)
}
