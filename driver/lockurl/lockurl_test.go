package lockurl_test

import (
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/golocker/locker"
	"github.com/golocker/locker/driver/lockurl"
)

func parse(t *testing.T, raw string) (*url.URL, *lockurl.Params) {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return u, lockurl.Parse(u)
}

// bad checks that err matches ErrBadURL, names every part of want, and
// never shows the password "secret".
func bad(t *testing.T, err error, want ...string) {
	t.Helper()
	if !errors.Is(err, locker.ErrBadURL) {
		t.Fatalf("error %v; want one matching ErrBadURL", err)
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not name %q", err, w)
		}
	}
	if strings.Contains(err.Error(), "secret") {
		t.Errorf("error %q shows the password", err)
	}
}

func TestHosts(t *testing.T) {
	_, p := parse(t, "x://a:1,b:2")
	if hs, err := p.Hosts(); err != nil || strings.Join(hs, " ") != "a:1 b:2" {
		t.Errorf("Hosts = %v, %v", hs, err)
	}
	_, p = parse(t, "x://u:secret@a:1,,b:2")
	_, err := p.Hosts()
	bad(t, err, "empty host")
	_, p = parse(t, "x:///path")
	_, err = p.Hosts()
	bad(t, err, "no host")
	// One slash too many: the password is in the path, hidden all the same.
	_, p = parse(t, "x:///u:secret@host")
	_, err = p.Hosts()
	bad(t, err, "x:///u:xxxxx@host has no host")
	// A "/", "?" or "#" in a password ends the host early: the host would
	// be the user and the start of the password.
	for _, raw := range []string{"x://u:secret/x@host", "x://u:secret?x@host", "x://u:secret#x@host"} {
		_, p = parse(t, strings.Replace(raw, "secret", "4242", 1))
		_, err = p.Hosts()
		bad(t, err, "percent-encode")
		if strings.Contains(err.Error(), "4242") {
			t.Errorf("%s: the error shows the password: %v", raw, err)
		}
	}
}

// TestWrap: Wrap names the store and the URL, hides the URL's parts, and
// leaves the words of the cause that are the password's text.
func TestWrap(t *testing.T) {
	_, p := parse(t, "x://u:dial@127.0.0.1:1?token=tcp")
	cause := errors.New("dial tcp 127.0.0.1:1 (token=tcp): connection refused")
	err := p.Wrap("x", cause)
	want := "x x://u:xxxxx@127.0.0.1:1?token=xxxxx: dial tcp 127.0.0.1:1 (token=xxxxx): connection refused"
	if !errors.Is(err, cause) || err.Error() != want {
		t.Errorf("Wrap = %q; want %q, matching its cause", err, want)
	}
	if p.Wrap("x", nil) != nil {
		t.Error("Wrap(nil) must be nil")
	}
}

func TestParametersAreTakenOnce(t *testing.T) {
	_, p := parse(t, "x://h?ttl=1s&prefix=a/&on=true&wait=2s&name=v&extra=1&other=2")
	if on, err := p.Bool("on"); err != nil || !on {
		t.Errorf("Bool(on) = %v, %v", on, err)
	}
	if off, err := p.Bool("absent"); err != nil || off {
		t.Errorf("Bool(absent) = %v, %v", off, err)
	}
	if d, err := p.Duration("wait", time.Second); err != nil || d != 2*time.Second {
		t.Errorf("Duration(wait) = %v, %v", d, err)
	}
	if d, err := p.Duration("absent", time.Second); err != nil || d != time.Second {
		t.Errorf("Duration(absent) = %v, %v; want the default", d, err)
	}
	if v, ok := p.Take("name"); !ok || v != "v" {
		t.Errorf("Take(name) = %q, %v", v, ok)
	}
	// ttl and prefix belong to locker.Open; the rest is unknown, sorted.
	bad(t, p.Unknown(), "unknown parameters extra, other")
	if rest := p.Rest(); len(rest) != 2 || p.Unknown() != nil {
		t.Errorf("Rest = %v and leaves %v", rest, p.Unknown())
	}
}

func TestBadValues(t *testing.T) {
	_, p := parse(t, "x://h?on=maybe&wait=-1s")
	_, err := p.Bool("on")
	bad(t, err, `on="maybe"`, "boolean")
	_, err = p.Duration("wait", time.Second)
	bad(t, err, `wait="-1s"`, "positive duration")
}

func TestTLS(t *testing.T) {
	_, p := parse(t, "x://h")
	if tc, err := p.TLS("", "ca", "cert", "key"); tc != nil || err != nil {
		t.Errorf("TLS without parameters = %v, %v; want nil, nil", tc, err)
	}
	_, p = parse(t, "plain://h?ca=ca.pem")
	_, err := p.TLS("secure", "ca", "cert", "key")
	bad(t, err, "need secure://")
	_, p = parse(t, "x://h?cert=c.pem")
	_, err = p.TLS("", "ca", "cert", "key")
	bad(t, err, "cert and key go together")
	_, p = parse(t, "x://h?ca=/nonexistent/ca.pem")
	_, err = p.TLS("", "ca", "cert", "key")
	bad(t, err, "ca:", "/nonexistent/ca.pem")
}

func TestCheckPassword(t *testing.T) {
	for _, tc := range []struct {
		url              string
		secure, insecure bool
		ok               bool
	}{
		{"x://u:secret@127.0.0.1:1", false, false, true},
		{"x://u:secret@localhost:1,127.0.0.2:2", false, false, true},
		{"x://u:secret@[::1]:2", false, false, true},
		{"x://u:secret@10.0.0.1:1", false, false, false},
		{"x://u:secret@127.0.0.1:1,db.example:2", false, false, false},
		{"x://u:secret@10.0.0.1:1", true, false, true},
		{"x://u:secret@10.0.0.1:1", false, true, true},
		{"x://u@10.0.0.1:1", false, false, true},
		{"x://10.0.0.1:1", false, false, true},
	} {
		_, p := parse(t, tc.url)
		hs, err := p.Hosts()
		if err != nil {
			t.Fatal(err)
		}
		err = p.CheckPassword(hs, tc.secure, tc.insecure)
		if tc.ok && err != nil {
			t.Errorf("%s (secure %v, insecure %v): %v; want nil", tc.url, tc.secure, tc.insecure, err)
		}
		if !tc.ok {
			if err == nil {
				t.Errorf("%s: nil; want the cleartext refusal", tc.url)
				continue
			}
			bad(t, err, "cleartext", "insecure=true")
		}
	}
}
