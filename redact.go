package locker

import (
	"errors"
	"net/url"
	"slices"
	"strconv"
	"strings"
)

// mask stands for a hidden secret.
const mask = "xxxxx"

// RedactedURL returns rawURL with its secrets replaced by "xxxxx", for
// messages that name the URL. It does not rely on rawURL parsing.
//
// The password is the text between the first ":" after the scheme and the
// last "@". The scheme is a prefix "name:/" ("redis://", "redis:/"); without
// one the password starts at the first ":" ("u:pw@host"). Every value of a
// secret query parameter (password, secret, token, …) is hidden too.
func RedactedURL(rawURL string) string {
	s := rawURL
	start := schemeEnd(s)
	if at := strings.LastIndexByte(s, '@'); at >= start {
		if c := strings.IndexByte(s[start:at], ':'); c >= 0 {
			s = s[:start+c+1] + mask + s[at:]
		}
	}
	var b strings.Builder
	last := 0
	for _, p := range queryParams(s) {
		if secretParam(p.name) {
			b.WriteString(s[last:p.start])
			b.WriteString(mask)
			last = p.end
		}
	}
	b.WriteString(s[last:])
	return b.String()
}

// RedactURL returns err with the secrets of rawURL hidden in its text, as
// [Open] hides them in its own errors; errors.Is and errors.As see err
// unchanged. It is for tools that print the errors of a Locker opened from
// a URL, whose backend client may quote the URL. A nil err stays nil.
//
// The secrets are hidden where they appear as parts of a URL: the URL
// itself, a password between ":" and "@", a secret parameter as name=value.
// The same text elsewhere in the message stays, so that a password "dial"
// does not mangle "dial tcp".
func RedactURL(err error, rawURL string) error {
	if err == nil {
		return nil
	}
	return scrubbed{err, secretsOf(rawURL, nil)}
}

// urlSecrets are the texts that show a URL's secrets in a message, each
// with its replacement, longest first.
type urlSecrets []replacement

// replacement replaces from with to; a value (whole) replacement applies
// only where from is not followed by more of a parameter value.
type replacement struct {
	from, to string
	value    bool
}

// secretsOf returns the secrets of rawURL and, when not nil, of u (the
// URL rawURL parsed to): the URL as written and as u prints it, its
// password between ":" and "@", and its secret parameters as name=value,
// each in the escaped forms a client may print.
func secretsOf(rawURL string, u *url.URL) urlSecrets {
	var s urlSecrets
	add := func(from, to string, value bool) {
		if from != "" && from != to && !slices.ContainsFunc(s, func(r replacement) bool { return r.from == from }) {
			s = append(s, replacement{from, to, value})
		}
	}
	urls := []string{rawURL}
	var passwords []string
	if u != nil {
		urls = append(urls, u.String())
		if p, ok := u.User.Password(); ok {
			passwords = append(passwords, p)
		}
	}
	var params []param
	for _, raw := range urls {
		add(raw, RedactedURL(raw), false)
		passwords = append(passwords, userinfoPasswords(raw)...)
		params = append(params, queryParams(raw)...)
	}
	for _, p := range passwords {
		for _, f := range forms(p) {
			add(":"+f+"@", ":"+mask+"@", false)
		}
	}
	for _, p := range params {
		if !secretParam(p.name) {
			continue
		}
		for _, f := range forms(p.value) {
			for _, n := range []string{p.rawName, p.name} {
				add(n+"="+f, n+"="+mask, true)
				add(n+"="+strconv.Quote(f), n+"="+strconv.Quote(mask), false)
			}
		}
	}
	// Longest first, so that a secret is hidden whole before a part of it
	// is looked for.
	slices.SortStableFunc(s, func(a, b replacement) int { return len(b.from) - len(a.from) })
	return s
}

// hide returns msg with every secret of s replaced.
func (s urlSecrets) hide(msg string) string {
	for _, r := range s {
		if !r.value {
			msg = strings.ReplaceAll(msg, r.from, r.to)
			continue
		}
		var b strings.Builder
		for {
			i := strings.Index(msg, r.from)
			if i < 0 {
				break
			}
			j := i + len(r.from)
			b.WriteString(msg[:i])
			if j < len(msg) && valueByte(msg[j]) {
				b.WriteString(r.from)
			} else {
				b.WriteString(r.to)
			}
			msg = msg[j:]
		}
		b.WriteString(msg)
		msg = b.String()
	}
	return msg
}

// valueByte reports whether c may continue a query parameter's value.
func valueByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("%-._~+=!*$:@/?", c) >= 0
}

// schemeEnd returns the index in s after a scheme prefix ("name:" and at
// least one "/"), 0 when s has none.
func schemeEnd(s string) int {
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z':
		case i > 0 && ('0' <= c && c <= '9' || c == '+' || c == '-' || c == '.'):
		case i > 0 && c == ':' && i+1 < len(s) && s[i+1] == '/':
			i++
			for i < len(s) && s[i] == '/' {
				i++
			}
			return i
		default:
			return 0
		}
	}
	return 0
}

// userinfoPasswords returns the passwords of raw as written: the text
// between the first ":" after the scheme and the last "@", and that of
// every "user:password@" in a host list (between the first ":" after a
// "@", "," or "/" and the next "@").
func userinfoPasswords(raw string) []string {
	start := schemeEnd(raw)
	at := strings.LastIndexByte(raw, '@')
	if at < start {
		return nil
	}
	var out []string
	if c := strings.IndexByte(raw[start:at], ':'); c >= 0 {
		out = append(out, raw[start+c+1:at])
	}
	seg := start
	for i := start; i <= at; i++ {
		switch raw[i] {
		case '@':
			if c := strings.IndexByte(raw[seg:i], ':'); c >= 0 {
				out = append(out, raw[seg+c+1:i])
			}
			seg = i + 1
		case ',', '/':
			seg = i + 1
		}
	}
	return out
}

// forms returns the ways a client may print secret v (as written in a
// URL): as written, unescaped, and escaped as a URL's query, path and
// userinfo escape it and as Go quotes it.
func forms(v string) []string {
	out := []string{v}
	for _, unescape := range []func(string) (string, error){url.PathUnescape, url.QueryUnescape} {
		if d, err := unescape(v); err == nil {
			out = append(out, d)
		}
	}
	for _, d := range slices.Clone(out) {
		q := strconv.Quote(d)
		out = append(out, url.QueryEscape(d), url.PathEscape(d), url.UserPassword("", d).String()[1:], q[1:len(q)-1])
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// param is a query parameter found in a text: its name as written and
// unescaped, its value as written, and where the value is in the text.
type param struct {
	rawName, name, value string
	start, end           int
}

// queryParams returns the name=value parameters of s that follow a "?" or
// an "&", wherever they are: s need not parse.
func queryParams(s string) []param {
	var out []param
	for i := 0; i < len(s); i++ {
		if s[i] != '?' && s[i] != '&' {
			continue
		}
		start := i + 1
		end := len(s)
		if n := strings.IndexByte(s[start:], '&'); n >= 0 {
			end = start + n
		}
		i = end - 1
		eq := strings.IndexByte(s[start:end], '=')
		if eq < 0 {
			continue
		}
		p := param{rawName: s[start : start+eq], value: s[start+eq+1 : end], start: start + eq + 1, end: end}
		p.name = p.rawName
		if d, err := url.QueryUnescape(p.rawName); err == nil {
			p.name = d
		}
		out = append(out, p)
	}
	return out
}

// parseProblem describes a url.Parse error without the pieces of the URL it
// quotes, which may come from the password ("invalid URL escape \"%t\"").
func parseProblem(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	msg := strings.TrimPrefix(err.Error(), "net/url: ")
	var b strings.Builder
	for {
		i := strings.IndexByte(msg, '"')
		if i < 0 {
			b.WriteString(msg)
			break
		}
		b.WriteString(msg[:i])
		b.WriteString("(hidden)")
		q, qerr := strconv.QuotedPrefix(msg[i:])
		if qerr != nil {
			break
		}
		msg = msg[i+len(q):]
	}
	return strings.TrimSpace(b.String())
}

// secretQueryParams are the query parameter names whose values are secrets.
var secretQueryParams = []string{"password", "passwd", "pass", "pwd", "secret", "token", "auth", "key", "tls_key", "credentials"}

// secretParam reports whether query parameter k holds a secret: its name
// is one of secretQueryParams, or ends with "_" and one of them
// (sentinel_password).
func secretParam(k string) bool {
	k = strings.ToLower(k)
	for _, s := range secretQueryParams {
		if k == s || strings.HasSuffix(k, "_"+s) {
			return true
		}
	}
	return false
}

// scrubbed is an error whose text has the given secrets replaced; errors.Is
// and errors.As see the original.
type scrubbed struct {
	err     error
	secrets urlSecrets
}

func (s scrubbed) Error() string { return s.scrub(s.err.Error()) }

func (s scrubbed) scrub(msg string) string { return s.secrets.hide(msg) }

func (s scrubbed) Unwrap() error { return s.err }
