// Package lockurl holds what every backend's URL opener (a [locker.OpenFunc])
// does the same way: host lists, boolean and duration parameters, TLS files,
// the refusal to send a password in cleartext, and the error for parameters
// nobody understood. The built-in backends use it (redis.Open, mysql.Open,
// etcd.Open, zookeeper.Open); a third-party backend can too, so that its
// URLs read and fail like ours.
//
// Every error it returns matches [locker.ErrBadURL] and names the URL with
// its secrets hidden ([locker.RedactedURL]) and the parameter at fault.
package lockurl

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"maps"
	"net"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/golocker/locker"
)

// Shared are the query parameters [locker.Open] handles for every scheme;
// [Parse] leaves them out of the backend's parameters.
var Shared = []string{"ttl", "prefix"}

// Params are the backend parameters of a locker URL: its query without the
// [Shared] ones. An opener takes the parameters it understands and ends with
// [Params.Unknown], which refuses the rest.
type Params struct {
	u *url.URL
	q url.Values
}

// Parse returns the backend parameters of u.
func Parse(u *url.URL) *Params {
	q := u.Query()
	for _, k := range Shared {
		q.Del(k)
	}
	return &Params{u: u, q: q}
}

// Redacted returns the URL with its secrets hidden, as [locker.RedactedURL]
// hides them, for messages that name it.
func (p *Params) Redacted() string { return locker.RedactedURL(p.u.String()) }

// Errorf returns an error matching [locker.ErrBadURL] that names the URL
// (redacted) and then says what format says, the URL's secrets hidden.
func (p *Params) Errorf(format string, args ...any) error {
	detail := locker.RedactURL(fmt.Errorf(format, args...), p.u.String())
	return fmt.Errorf("%w: %s: %v", locker.ErrBadURL, p.Redacted(), detail)
}

// Wrap returns err behind what (the store's name) and the redacted URL, its
// text without the URL's secrets; errors.Is and errors.As see err. Nil
// stays nil.
func (p *Params) Wrap(what string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%s %s: %w", what, p.Redacted(), locker.RedactURL(err, p.u.String()))
}

// Hosts splits the URL's comma-separated host list; it refuses an empty host
// and an empty entry in the list. It refuses a host with a port and an "@"
// after the host without a password before it: a password holding "/", "?"
// or "#" unescaped ends the host early, and the host would be its start.
func (p *Params) Hosts() ([]string, error) {
	if p.u.Host == "" {
		return nil, fmt.Errorf("%w: %s has no host", locker.ErrBadURL, p.Redacted())
	}
	if _, ok := p.u.User.Password(); !ok && strings.Contains(p.u.Host, ":") &&
		strings.Contains(p.u.Path+p.u.Fragment+strings.ReplaceAll(strings.ToUpper(p.u.RawQuery), "%40", "@"), "@") {
		// Not named: its host may be the start of a password.
		return nil, fmt.Errorf("%w: the %s:// URL has an \"@\" after its host: percent-encode \"/\", \"?\", \"#\" and \"@\" in a password", locker.ErrBadURL, p.u.Scheme)
	}
	hs := strings.Split(p.u.Host, ",")
	if slices.Contains(hs, "") {
		return nil, fmt.Errorf("%w: %s has an empty host in its list", locker.ErrBadURL, p.Redacted())
	}
	return hs, nil
}

// Take takes parameter name out of the parameters: its value and whether it
// was given.
func (p *Params) Take(name string) (string, bool) {
	v, ok := p.q.Get(name), p.q.Has(name)
	p.q.Del(name)
	return v, ok
}

// Bool takes the boolean parameter name (false when absent).
func (p *Params) Bool(name string) (bool, error) {
	v, ok := p.Take(name)
	if !ok {
		return false, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, p.Errorf("parameter %s=%q is not a boolean", name, v)
	}
	return b, nil
}

// Duration takes the positive duration parameter name (a Go duration such
// as "5s"); def when absent.
func (p *Params) Duration(name string, def time.Duration) (time.Duration, error) {
	v, ok := p.Take(name)
	if !ok {
		return def, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		return 0, p.Errorf("parameter %s=%q is not a positive duration", name, v)
	}
	return d, nil
}

// TLS takes the TLS file parameters caName, certName and keyName (PEM files:
// a private CA, a client certificate and its key) and loads them; nil when
// none is given. They need the URL's scheme to be tlsScheme ("" for any), and
// the certificate and the key go together.
func (p *Params) TLS(tlsScheme, caName, certName, keyName string) (*tls.Config, error) {
	ca, _ := p.Take(caName)
	cert, _ := p.Take(certName)
	key, _ := p.Take(keyName)
	if ca == "" && cert == "" && key == "" {
		return nil, nil
	}
	if tlsScheme != "" && p.u.Scheme != tlsScheme {
		return nil, p.Errorf("%s, %s and %s need %s://", caName, certName, keyName, tlsScheme)
	}
	if (cert == "") != (key == "") {
		return nil, p.Errorf("%s and %s go together", certName, keyName)
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if ca != "" {
		pem, err := os.ReadFile(ca)
		if err != nil {
			return nil, p.Errorf("%s: %v", caName, err)
		}
		tc.RootCAs = x509.NewCertPool()
		if !tc.RootCAs.AppendCertsFromPEM(pem) {
			return nil, p.Errorf("%s: no PEM certificate in %s", caName, ca)
		}
	}
	if cert != "" {
		pair, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			return nil, p.Errorf("%s/%s: %v", certName, keyName, err)
		}
		tc.Certificates = []tls.Certificate{pair}
	}
	return tc, nil
}

// CheckPassword refuses a URL that would send its password in cleartext
// (secure says the connection uses TLS) to one of hosts that is not this
// machine (localhost or a literal loopback address), unless insecure (the
// opener's insecure=true parameter) says the caller accepts it.
func (p *Params) CheckPassword(hosts []string, secure, insecure bool) error {
	_, hasPassword := p.u.User.Password()
	return p.CheckSecret("the password", hasPassword, hosts, secure, insecure)
}

// CheckSecret is CheckPassword for a secret the opener found elsewhere (a
// parameter it took out of the URL, so that no error shows it), named what
// in the error; given says whether the URL had it.
func (p *Params) CheckSecret(what string, given bool, hosts []string, secure, insecure bool) error {
	if !given || secure || insecure {
		return nil
	}
	for _, h := range hosts {
		if !Loopback(h) {
			return p.Errorf("refusing to send %s in cleartext to %s: use TLS, or add insecure=true", what, h)
		}
	}
	return nil
}

// Rest returns the parameters not taken yet; an opener that hands them to
// its client takes them all.
func (p *Params) Rest() url.Values {
	q := p.q
	p.q = url.Values{}
	return q
}

// Unknown returns an error naming the parameters not taken, nil when there
// are none.
func (p *Params) Unknown() error {
	if len(p.q) == 0 {
		return nil
	}
	return p.Errorf("unknown parameters %s", strings.Join(slices.Sorted(maps.Keys(p.q)), ", "))
}

// Loopback reports whether host (host or host:port) is this machine:
// localhost or a literal loopback address. Other names are not resolved.
func Loopback(host string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(strings.Trim(host, "[]"))
	return ip != nil && ip.IsLoopback()
}
