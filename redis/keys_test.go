package redis

import (
	"testing"
)

// TestLockNames: the names made once per acquisition are those of name, for
// a key with a hash tag of its own and for one that needs the hashed form.
func TestLockNames(t *testing.T) {
	for _, s := range []string{"k", "orders:{eu}:42", "a}b", "}"} {
		n := newLockNames(s)
		want := scriptKeys(s)
		for i := range want {
			if n.keys[i] != want[i] {
				t.Errorf("newLockNames(%q).keys[%d] = %q, want %q", s, i, n.keys[i], want[i])
			}
		}
		if n.channel != channelName(s) || n.channelArg != any(channelName(s)) {
			t.Errorf("newLockNames(%q) channel %q (argument %v), want %q", s, n.channel, n.channelArg, channelName(s))
		}
	}
}
