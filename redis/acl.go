package redis

import (
	"strings"
)

// hashTagGlob matches the 16 hex digits of the hash tag of the names of a
// store key that contains '}' (see the naming rules in keys.go).
const hashTagGlob = "#{????????????????}:"

// ACLRules returns the Redis ACL selectors (for ACL SETUSER or an ACL file)
// that give a user the keys and channels of every lock whose store key
// starts with prefix (the Locker's locker.WithPrefix), and no other lock's:
//
//	~locker:{tenant1/*  ~locker:#{????????????????}:lock:tenant1/*  …  &locker:{tenant1/*  …
//
// A store key containing '}' has names of another form (a hash tag made of
// its hash, then the kind, then the key): "~locker:{P*" alone does not
// cover them, and such a key's Lock would fail with NOPERM. The selectors
// for that form name each kind, so that another tenant's key that happens
// to contain ":P" never matches. Glob characters in prefix are escaped.
//
// Add the commands a Locker runs (EVALSHA, EVAL, PUBLISH, SUBSCRIBE, …) to
// the same rule; prefixes must end with '/' or ':', and a prefix that
// extends another ("a/" and "a/b/") shares its keys.
func ACLRules(prefix string) []string {
	p := globEscape(prefix)
	var rules []string
	if !strings.Contains(prefix, "}") {
		rules = append(rules, "~"+namespace+"{"+p+"*")
	}
	for _, kind := range []string{kindLock, kindFence, kindQueue, kindWaiters,
		kindShareHolds, kindShareOldMeta, kindShareQueue, kindShareWaiters, kindCut} {
		rules = append(rules, "~"+namespace+hashTagGlob+kind+":"+p+"*")
	}
	if !strings.Contains(prefix, "}") {
		rules = append(rules, "&"+namespace+"{"+p+"*")
	}
	return append(rules, "&"+namespace+hashTagGlob+kindChannel+":"+p+"*")
}

// globEscape escapes the characters Redis glob patterns give a meaning.
func globEscape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '*', '?', '[', ']', '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}
