package locker

import (
	"errors"
	"net/url"
	"slices"
	"strconv"
	"strings"
)

// RedactURL returns err with the secrets of rawURL (its password, the
// values of secret query parameters) hidden in its text, as [Open] hides
// them in its own errors; errors.Is and errors.As see err unchanged. It is
// for tools that print the errors of a Locker opened from a URL, whose
// backend client may quote the URL. A nil err stays nil.
func RedactURL(err error, rawURL string) error {
	if err == nil {
		return nil
	}
	u, perr := url.Parse(rawURL)
	if perr != nil {
		return err
	}
	return scrubbed{err, secretsOf(u)}
}

// redact returns u as a string without its password, for error messages.
func redact(u *url.URL) string { return u.Redacted() }

// redactRaw hides the password of a URL that does not parse: everything
// between the scheme's "//" and the last "@" after it, but for the user
// name, is replaced. It errs on hiding too much.
func redactRaw(raw string) string {
	scheme, rest, ok := strings.Cut(raw, "://")
	if !ok {
		scheme, rest = "", raw
	}
	at := strings.LastIndex(rest, "@")
	if at < 0 {
		if ok {
			return strconv.Quote(scheme + "://" + rest)
		}
		return strconv.Quote(rest)
	}
	user, _, _ := strings.Cut(rest[:at], ":")
	if ok {
		scheme += "://"
	}
	return strconv.Quote(scheme + user + ":xxxxx@" + rest[at+1:])
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

// secretsOf returns the secrets a URL carries: its password and the values
// of secret query parameters, each as written and as escaped in URLs.
func secretsOf(u *url.URL) []string {
	var vals []string
	if p, ok := u.User.Password(); ok {
		vals = append(vals, p)
	}
	for k, vs := range u.Query() {
		if secretParam(k) {
			vals = append(vals, vs...)
		}
	}
	var out []string
	for _, v := range vals {
		if v == "" {
			continue
		}
		out = append(out, v, url.QueryEscape(v), url.PathEscape(v), url.UserPassword("", v).String()[1:])
	}
	// Longest first, so that a secret is hidden whole before a shorter
	// form of it is looked for.
	slices.SortFunc(out, func(a, b string) int { return len(b) - len(a) })
	return slices.Compact(out)
}

// scrubbed is an error whose text has the given secrets replaced; errors.Is
// and errors.As see the original.
type scrubbed struct {
	err     error
	secrets []string
}

func (s scrubbed) Error() string { return s.scrub(s.err.Error()) }

func (s scrubbed) scrub(msg string) string {
	for _, v := range s.secrets {
		msg = strings.ReplaceAll(msg, v, "xxxxx")
	}
	return msg
}

func (s scrubbed) Unwrap() error { return s.err }
