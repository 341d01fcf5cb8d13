package zookeeper

import (
	"encoding/base64"
	"errors"
	"fmt"
	"strings"

	"github.com/go-zookeeper/zk"
)

// The names ParseACL accepts for common entries.
const (
	// ACLCreator is the entry "auth::cdrwa": everything for the identities
	// the connection authenticated with (every Locker of the root must use
	// the same credentials). It needs credentials ([Config].Digest).
	ACLCreator = "creator"

	// ACLWorldRead is the entry "world:anyone:r": anyone may read the
	// nodes (list a key's queue, read a holder's label), for monitoring
	// tools; add it to ACLCreator ("creator,world-read").
	ACLWorldRead = "world-read"
)

// permLetters are ZooKeeper's permission letters, as zkCli.sh writes them.
var permLetters = []struct {
	letter byte
	perm   int32
}{{'c', zk.PermCreate}, {'d', zk.PermDelete}, {'r', zk.PermRead}, {'w', zk.PermWrite}, {'a', zk.PermAdmin}}

// ParseACL parses an ACL as the zk:// URL's acl parameter gives it: entries
// separated by commas, each [ACLCreator], [ACLWorldRead], or
// scheme:id:perms as zkCli.sh writes them, perms being letters of "cdrwa"
// (create, delete, read, write, admin):
//
//	creator
//	creator,world-read
//	digest:locker:kT8hz9Sk4SE7bT+fxu0xFTQsRmk=:cdrw,world:anyone:r
//	ip:10.0.0.0/8:cdrw
//
// A digest id is user:base64(sha1(user:password)), the form
// zk.DigestACL makes (in a URL its '+' must be written %2B). See
// [Config].ACL for the permissions a Locker needs. Errors name the entry.
func ParseACL(s string) ([]zk.ACL, error) {
	if s == "" {
		return nil, errors.New("empty ACL")
	}
	var acl []zk.ACL
	for _, e := range strings.Split(s, ",") {
		switch e {
		case ACLCreator:
			acl = append(acl, zk.ACL{Perms: zk.PermAll, Scheme: "auth", ID: ""})
			continue
		case ACLWorldRead:
			acl = append(acl, zk.ACL{Perms: zk.PermRead, Scheme: "world", ID: "anyone"})
			continue
		}
		i, j := strings.IndexByte(e, ':'), strings.LastIndexByte(e, ':')
		if i <= 0 || i == j {
			return nil, fmt.Errorf("ACL entry %q is not %s, %s or scheme:id:perms", e, ACLCreator, ACLWorldRead)
		}
		a := zk.ACL{Scheme: e[:i], ID: e[i+1 : j]}
		for _, c := range []byte(e[j+1:]) {
			k := 0
			for k < len(permLetters) && permLetters[k].letter != c {
				k++
			}
			if k == len(permLetters) || a.Perms&permLetters[k].perm != 0 {
				return nil, fmt.Errorf("ACL entry %q: permissions %q are not distinct letters of \"cdrwa\"", e, e[j+1:])
			}
			a.Perms |= permLetters[k].perm
		}
		acl = append(acl, a)
	}
	if err := validateACL(acl); err != nil {
		return nil, err
	}
	return acl, nil
}

// validateACL checks what ZooKeeper would refuse, or silently read
// otherwise, in an ACL: empty permissions or unknown bits, a world id other
// than "anyone", a digest id that is not user:base64(sha1).
func validateACL(acl []zk.ACL) error {
	for _, a := range acl {
		entry := fmt.Sprintf("%s:%s:%05b", a.Scheme, a.ID, a.Perms)
		switch {
		case a.Perms == 0 || a.Perms&^zk.PermAll != 0:
			return fmt.Errorf("ACL entry %s: permissions must be a non-empty set of zk.PermCreate, PermDelete, PermRead, PermWrite and PermAdmin", entry)
		case a.Scheme == "":
			return fmt.Errorf("ACL entry %s: no scheme", entry)
		case a.Scheme == "world" && a.ID != "anyone":
			return fmt.Errorf(`ACL entry %s: the world scheme's only id is "anyone"`, entry)
		case a.Scheme == "digest":
			user, hash, ok := strings.Cut(a.ID, ":")
			if strings.Contains(hash, " ") {
				return fmt.Errorf("ACL entry %s: the digest has a space: in a URL, write its '+' as %%2B", entry)
			}
			if b, err := base64.StdEncoding.DecodeString(hash); !ok || user == "" || err != nil || len(b) != 20 {
				return fmt.Errorf("ACL entry %s: a digest id is user:base64(sha1(user:password)), as zk.DigestACL makes it", entry)
			}
		}
	}
	return nil
}

// needsAuth reports whether acl has an entry of the "auth" scheme, which
// ZooKeeper refuses (zk.ErrInvalidACL) from a connection without
// credentials.
func needsAuth(acl []zk.ACL) bool {
	for _, a := range acl {
		if a.Scheme == "auth" {
			return true
		}
	}
	return false
}

// nodeACL is the ACLs of the nodes a Locker creates.
type nodeACL struct {
	containers []zk.ACL // Root, its ancestors, the key nodes
	locks      []zk.ACL // the lock nodes
	// probe marks the default creator's ACL of a connection not yet known
	// to carry credentials: a zk.ErrInvalidACL refusal means it has none.
	probe bool
}

// currentACL returns the ACLs the Locker sets on the nodes it creates.
func (d *zkDriver) currentACL() *nodeACL { return d.acls.Load() }

// fallBack handles err, the outcome of creating a node with the ACLs tried.
// When tried was the default creator's ACL and ZooKeeper refused it with
// zk.ErrInvalidACL, the connection carries no credentials: the Locker takes
// the world's default ACLs from now on, warns once, and fallBack reports
// true (create the node again).
func (d *zkDriver) fallBack(tried *nodeACL, err error) bool {
	if !tried.probe || !errors.Is(err, zk.ErrInvalidACL) {
		return false
	}
	containers, locks := DefaultACL(false)
	if d.acls.CompareAndSwap(tried, &nodeACL{containers: containers, locks: locks}) {
		d.logger.Warn("locker: zookeeper connection has no credentials, so the lock nodes are world-deletable: anyone who reaches ZooKeeper can break the locks; authenticate the connection (conn.AddAuth before New, or Config.Digest)",
			"root", d.root)
	}
	return true
}
