// Package secreturl is the table of malformed and unreachable locker URLs,
// each with a password, through which the integration tests check that no
// error shows a URL's password: through locker.Open, every backend's
// opener and lockctl.
package secreturl

import (
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// Passwords are tried in every URL: short ones, and words that the error
// messages also hold, which must stay intact.
var Passwords = []string{"dial", "tcp", "redis", "a", "host", "connect", "s3cret", "6379"}

// others are passwords that no message holds unless they leak: one of
// letters, one of digits (a URL parses alike with either of a class).
var others = []string{"Qz7wOtherPw", "4815162342"}

// other is the password of others of pw's class.
func other(pw string) int {
	if strings.Trim(pw, "0123456789") == "" {
		return 1
	}
	return 0
}

// URLs are the templates of the table: {s} is the scheme, {pw} the password
// and {port} a closed port on 127.0.0.1.
var URLs = []string{
	"u:{pw}@127.0.0.1:{port}",
	"{s}//u:{pw}@127.0.0.1:{port}",
	"{s}:/u:{pw}@127.0.0.1:{port}",
	"{s}:///u:{pw}@127.0.0.1:{port}",
	"{s}:u:{pw}@127.0.0.1:{port}",
	"{s} ://u:{pw}@127.0.0.1:{port}",
	":{s}://u:{pw}@127.0.0.1:{port}",
	"{s}://u:{pw}@127.0.0.1:{port}",
	"{s}://:{pw}@127.0.0.1:{port}",
	"{s}://u:{pw}%40x@127.0.0.1:{port}",
	"{s}://u:{pw}%2F%3A@127.0.0.1:{port}",
	"{s}://u:{pw}%zz@127.0.0.1:{port}",
	"{s}://u:{pw}:{pw}@127.0.0.1:{port}",
	"{s}://u:{pw}@@127.0.0.1:{port}",
	"{s}://u:{pw}#frag@127.0.0.1:{port}",
	"{s}://u:{pw}?x@127.0.0.1:{port}",
	"{s}://u:{pw}/x@127.0.0.1:{port}",
	"{s}://u:{pw} x@127.0.0.1:{port}",
	"{s}://u:{pw}@127.0.0.1:{port},u2:{pw}@127.0.0.1:{port}",
	"{s}://127.0.0.1:{port},u:{pw}@127.0.0.1:{port}",
	"{s}://u:{pw}@",
	"{s}://u:{pw}@,127.0.0.1:{port}",
	"{s}://u:{pw}@127.0.0.2:{port}",
	"{s}://u:{pw}@127.0.0.1:port",
	"{s}://u:{pw}@[::1",
	"{s}://u:{pw}@ho st",
	"{s}://u:{pw}@127.0.0.1:{port}/%",
	"{s}://u:{pw}@127.0.0.1:{port}/0?ttl=forever",
	"{s}://u:{pw}@127.0.0.1:{port}/0?ttl=1ms",
	"{s}://u:{pw}@127.0.0.1:{port}/0?bogus=1",
	"{s}://u:{pw}@127.0.0.1:{port}/0?insecure=maybe",
	"{s}://u:{pw}@127.0.0.1:{port}?password={pw}",
	"{s}://127.0.0.1:{port}?password={pw}",
	"{s}://127.0.0.1:{port}?pass={pw}",
	"{s}://127.0.0.1:{port}?secret={pw}",
	"{s}://127.0.0.1:{port}?token={pw}&ttl=5s",
	"{s}://127.0.0.1:{port}?master_name=m&sentinel_password={pw}",
}

// Size is the number of URLs [Check] opens.
func Size() int { return len(URLs) * (len(others) + len(Passwords)) }

// Fill returns template tmpl for scheme, password pw and port.
func Fill(tmpl, scheme, pw string, port int) string {
	return strings.NewReplacer("{s}", scheme, "{pw}", pw, "{port}", strconv.Itoa(port)).Replace(tmpl)
}

// Check fills every template of [URLs] for scheme and port with every
// password of [Passwords], and with another one, and opens each URL with
// open, at most parallel at a time. open returns the error text, ok false
// where it does not apply (a URL it cannot take); a URL that opens is an
// error of open's to report. Check fails t when a text shows the other
// password, or when the text of a password differs from the other's:
// either it shows the password, or hiding it changed the rest.
func Check(t *testing.T, scheme string, port int, parallel int, open func(raw string) (msg string, ok bool)) {
	t.Helper()
	CheckSome(t, scheme, port, parallel, URLs, Passwords, open)
}

// CheckSome is [Check] on the templates of urls and the passwords of
// passwords only, each template also filled with the other passwords: for
// a caller that checks its own handling of errors whose every template and
// password a [Check] elsewhere covers.
func CheckSome(t *testing.T, scheme string, port int, parallel int, urls, passwords []string, open func(raw string) (msg string, ok bool)) {
	t.Helper()
	type result struct {
		msg string
		ok  bool
	}
	pws := append(slices.Clone(others), passwords...)
	results := make([][]result, len(urls))
	sem := make(chan struct{}, parallel)
	var wg sync.WaitGroup
	for i, tmpl := range urls {
		results[i] = make([]result, len(pws))
		for j, pw := range pws {
			wg.Go(func() {
				sem <- struct{}{}
				defer func() { <-sem }()
				msg, ok := open(Fill(tmpl, scheme, pw, port))
				results[i][j] = result{msg, ok}
			})
		}
	}
	wg.Wait()
	for i, tmpl := range urls {
		for j, o := range others {
			if r := results[i][j]; r.ok && strings.Contains(r.msg, o) {
				t.Errorf("%s: the error shows the password %q: %s", Fill(tmpl, scheme, o, port), o, r.msg)
			}
		}
		for j, pw := range passwords {
			want := results[i][other(pw)]
			got := results[i][len(others)+j]
			if got.ok != want.ok || settled(got.msg) != settled(want.msg) {
				t.Errorf("%s: the error must read as with any other password:\n got %s\nwant %s",
					Fill(tmpl, scheme, pw, port), got.msg, want.msg)
			}
		}
	}
}

// dialOutcome matches the ways a dial of the closed port can end, which
// differ from one attempt to the next under load (the client's retries
// against the ctx's deadline): they are not the password's doing. pgx's
// refusal lists its attempts after the user and database, a line each
// (joined with "; " by locker.Open); under load its open outlasts the
// deadline instead. A mangled word ("xxxxx tcp") does not
// match, so it is still caught.
var dialOutcome = regexp.MustCompile("failed to connect to `user=[^`]* database=[^`]*`:" +
	`(?:(?:; |\n)\t127\.0\.0\.[12]:\d+ \(127\.0\.0\.[12]\): dial error: (?:` + dialEnd + `))+|` + dialEnd)

// dialEnd is how one dial of the closed port ends.
const dialEnd = `dial tcp 127\.0\.0\.[12]:\d+: connect: connection refused|context deadline exceeded|i/o timeout|redis: client is closed`

// settled is msg with its dial outcome replaced by one placeholder.
func settled(msg string) string { return dialOutcome.ReplaceAllString(msg, "<dial outcome>") }
