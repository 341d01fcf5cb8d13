package zookeeper_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/go-zookeeper/zk"

	"github.com/golocker/locker"
	"github.com/golocker/locker/zookeeper"
)

func TestParseACL(t *testing.T) {
	// The digest of locker:s3cret has a '+'.
	digest := zk.DigestACL(zk.PermRead|zk.PermWrite|zk.PermCreate|zk.PermDelete, "locker", "s3cret")[0]
	good := []struct {
		in   string
		want []zk.ACL
	}{
		{"creator", zk.AuthACL(zk.PermAll)},
		{"creator,world-read", append(zk.AuthACL(zk.PermAll), zk.WorldACL(zk.PermRead)...)},
		{"world:anyone:cdrw", zk.WorldACL(zk.PermCreate | zk.PermDelete | zk.PermRead | zk.PermWrite)},
		{"digest:" + digest.ID + ":rwcd", []zk.ACL{digest}},
		{"ip:10.0.0.0/8:r,world:anyone:a", []zk.ACL{{Perms: zk.PermRead, Scheme: "ip", ID: "10.0.0.0/8"}, {Perms: zk.PermAdmin, Scheme: "world", ID: "anyone"}}},
	}
	for _, c := range good {
		got, err := zookeeper.ParseACL(c.in)
		if err != nil || !slices.Equal(got, c.want) {
			t.Errorf("ParseACL(%q) = %v, %v; want %v", c.in, got, err, c.want)
		}
	}
	bad := []struct{ in, says string }{
		{"", "empty"},
		{"everyone", `"everyone"`},
		{"world:anyone", `"world:anyone"`},
		{"world:anyone:rwx", `"rwx"`},
		{"world:anyone:rr", `"rr"`},
		{"world:anyone:", "non-empty"},
		{"world:bob:r", "anyone"},
		{":x:r", "scheme"},
		{"digest:locker:notahash:r", "base64"},
		{"digest:" + strings.Replace(digest.ID, "+", " ", 1) + ":r", "%2B"},
		{"creator,", `""`},
	}
	for _, c := range bad {
		_, err := zookeeper.ParseACL(c.in)
		if err == nil || !strings.Contains(err.Error(), c.says) {
			t.Errorf("ParseACL(%q) = %v; want an error saying %s", c.in, err, c.says)
		}
	}
}

func TestNewRefusesBadACL(t *testing.T) {
	conn, _, err := zk.Connect([]string{"127.0.0.1:1"}, 0, zk.WithLogger(quiet{}))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for _, acl := range [][]zk.ACL{
		{{Perms: 0, Scheme: "world", ID: "anyone"}},
		{{Perms: 64, Scheme: "world", ID: "anyone"}},
		{{Perms: zk.PermRead, Scheme: "digest", ID: "user:password"}},
	} {
		_, err := zookeeper.Config{ACL: acl}.New(conn, nil)
		if !errors.Is(err, locker.ErrInvalidOption) || !strings.Contains(err.Error(), "Config.ACL") {
			t.Errorf("New with ACL %v = %v; want ErrInvalidOption naming Config.ACL", acl, err)
		}
	}
}

type quiet struct{}

func (quiet) Printf(string, ...any) {}
