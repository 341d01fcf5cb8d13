package redis

import (
	"fmt"
	"testing"
)

// TestLockNames: the names made once per acquisition, and a tombstone's,
// are those of name, for a key with a hash tag of its own and for one that
// needs the hashed form.
func TestLockNames(t *testing.T) {
	for _, s := range []string{"k", "orders:{eu}:42", "a}b", "}"} {
		n := newLockNames(s)
		want := scriptKeys(s)
		for i := range want {
			if n.keys[i] != want[i] {
				t.Errorf("newLockNames(%q).keys[%d] = %q, want %q", s, i, n.keys[i], want[i])
			}
		}
		if tomb := cutKey(s, "o"); tomb != name(kindCut, s)+":o" {
			t.Errorf("cutKey(%q, \"o\") = %q, want %q", s, tomb, name(kindCut, s)+":o")
		}
		if n.channel != channelName(s) || n.channelArg != any(channelName(s)) {
			t.Errorf("newLockNames(%q) channel %q (argument %v), want %q", s, n.channel, n.channelArg, channelName(s))
		}
	}
}

// TestLockNamesCache: a Locker names a key it takes again, as a lock or
// with shared holds, from its caches, without making the names again, and
// never hands out another key's names, however many keys share a slot of a
// cache.
func TestLockNamesCache(t *testing.T) {
	d := newDriver(nil)
	first := d.lockNames("k")
	if again := d.lockNames("k"); again != first {
		t.Error("the names of a key taken again were made again")
	}
	if st := d.shareState("k"); st != d.shareState("k") {
		t.Error("the names of a key whose shared holds were taken again were made again")
	}
	for i := range 4 * namesCacheSize {
		for _, s := range []string{fmt.Sprintf("key-%d", i), fmt.Sprintf("a}%d", i)} {
			n := d.lockNames(s)
			if n.key != s || n.keys != newLockNames(s).keys || n.channel != channelName(s) {
				t.Fatalf("lockNames(%q) returned the names of %q: %v", s, n.key, n.keys)
			}
			st := d.shareState(s)
			if st.key != s || [5]string(sharedKeys(s)) != st.keys || st.channel != channelName(s) || st.channelArg != any(st.channel) {
				t.Fatalf("shareState(%q) returned the names of %q: %v", s, st.key, st.keys)
			}
		}
	}
}
