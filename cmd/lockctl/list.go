//go:build unix

package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/golocker/locker"
)

// lsCmd is "lockctl ls".
func lsCmd(args []string, stdout, stderr io.Writer) int {
	c := newCLI("ls", stdout, stderr)
	asJSON := c.fs.Bool("json", false, "print a JSON array")
	return c.onPrefix(args, func(ctx context.Context, l locker.Locker, prefix string) int {
		return c.ls(ctx, l, prefix, *asJSON)
	})
}

// onPrefix is onKey for the commands that take an optional PREFIX.
func (c *cli) onPrefix(args []string, do func(ctx context.Context, l locker.Locker, prefix string) int) int {
	pos, err := c.parse(args)
	if err == nil && len(pos) > 1 {
		err = fmt.Errorf("one PREFIX expected, got %s", strings.Join(pos, " "))
	}
	if err != nil {
		return c.usageError(err)
	}
	prefix := ""
	if len(pos) == 1 {
		prefix = pos[0]
	}
	return c.withStore(func(ctx context.Context, l locker.Locker) int { return do(ctx, l, prefix) })
}

// statusOf is the printed form of one listed key.
func statusOf(ks locker.KeyStatus) status {
	out := status{Key: ks.Key, Held: ks.Held, Owner: ks.Label, Token: ks.Token, Waiters: ks.Waiters,
		Acquired: timePtr(ks.Acquired), Expires: timePtr(ks.Expires), Limit: ks.Limit}
	for _, h := range ks.Holders {
		out.InUse += h.Weight
		out.Holders = append(out.Holders, holder{Mode: h.Mode.String(), Weight: h.Weight, Owner: h.Label, Token: h.Token,
			Acquired: timePtr(h.Acquired), Expires: timePtr(h.Expires)})
	}
	if utf8.Valid(ks.Data) {
		out.Data = string(ks.Data)
	} else {
		out.DataBase64 = ks.Data
	}
	return out
}

// ls prints every key held under prefix as it is listed: a table, or a
// JSON array of inspect's objects.
func (c *cli) ls(ctx context.Context, l locker.Locker, prefix string, asJSON bool) int {
	var tw *tabwriter.Writer
	if asJSON {
		fmt.Fprint(c.stdout, "[")
	} else {
		tw = tabwriter.NewWriter(c.stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "KEY\tOWNER\tTOKEN\tHELD FOR\tEXPIRES IN\tWAITERS\tDATA")
	}
	n, now := 0, time.Now()
	for ks, err := range locker.List(ctx, l, prefix) {
		if err != nil {
			if errors.Is(err, errors.ErrUnsupported) {
				err = fmt.Errorf("this store cannot list its keys: %w", err)
			}
			if tw != nil {
				_ = tw.Flush()
			}
			return c.fail(err)
		}
		n++
		s := statusOf(ks)
		if asJSON {
			b, err := json.Marshal(s)
			if err != nil {
				return c.fail(err)
			}
			sep := ",\n  "
			if n == 1 {
				sep = "\n  "
			}
			fmt.Fprintf(c.stdout, "%s%s", sep, b)
			continue
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%d\t%s\n", s.Key, orDash(s.Owner), s.Token, since(s.Acquired, now), until(s.Expires, now), s.Waiters, orDash(shorten(s.dataText(), 40)))
	}
	if asJSON {
		if n > 0 {
			fmt.Fprint(c.stdout, "\n")
		}
		fmt.Fprintln(c.stdout, "]")
		return exitOK
	}
	_ = tw.Flush()
	return exitOK
}

// orDash is s, or "-" when empty.
func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// since is how long ago t was, to the second; "-" when unknown.
func since(t *time.Time, now time.Time) string {
	if t == nil {
		return "-"
	}
	return max(now.Sub(*t), 0).Round(time.Second).String()
}

// until is how long until t, to the second; "-" when unknown.
func until(t *time.Time, now time.Time) string {
	if t == nil {
		return "-"
	}
	return max(t.Sub(now), 0).Round(time.Second).String()
}

// shorten cuts s to at most n runes, marking the cut with "…".
func shorten(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}
