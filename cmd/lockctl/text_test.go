package main

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/golocker/locker"
)

// TestTextHidesURLSecrets: an error that quotes the URL after the Locker
// was opened (a backend client's message; none of ours does so today) is
// printed with the URL's secrets hidden, and errors.Is still sees the
// cause. integration/lockctl's table cannot show this: every message it
// provokes comes from locker.Open, which hides the secrets itself.
func TestTextHidesURLSecrets(t *testing.T) {
	const url = "redis://app:pa55word@127.0.0.1:6379/0?tls_key=k3y-secret"
	c := newCLI("run", io.Discard, io.Discard)
	c.url = url
	for _, err := range []error{
		fmt.Errorf("release: dial %s: %w", url, locker.ErrNotHeld),
		fmt.Errorf("auth failed for app:pa55word@127.0.0.1: %w", locker.ErrNotHeld),
		fmt.Errorf("option tls_key=k3y-secret refused: %w", locker.ErrNotHeld),
	} {
		msg := c.text(err)
		for _, secret := range []string{"pa55word", "k3y-secret"} {
			if strings.Contains(msg, secret) {
				t.Errorf("text(%q) = %q: shows the secret %q", err, msg, secret)
			}
		}
		if !strings.Contains(msg, "127.0.0.1") && !strings.Contains(msg, "refused") {
			t.Errorf("text(%q) = %q: hides more than the secrets", err, msg)
		}
		if !errors.Is(locker.RedactURL(err, url), locker.ErrNotHeld) {
			t.Errorf("RedactURL(%q) loses the cause", err)
		}
	}
}
