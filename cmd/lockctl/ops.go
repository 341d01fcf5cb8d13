//go:build unix

package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"
	"time"
	"unicode"

	"github.com/golocker/locker"
)

// status is inspect's JSON output.
type status struct {
	Key      string     `json:"key"`
	Held     bool       `json:"held"`
	Owner    string     `json:"owner,omitempty"`
	Token    uint64     `json:"token,omitempty"`
	Acquired *time.Time `json:"acquired,omitempty"`
	Expires  *time.Time `json:"expires,omitempty"`
	Waiters  int        `json:"waiters"`
	// Data is the holder's data (locker.WithData) when it is UTF-8 text,
	// DataBase64 when it is not.
	Data       string `json:"data,omitempty"`
	DataBase64 []byte `json:"data_base64,omitempty"`
	// Limit, InUse and Holders describe a semaphore's or read-write
	// lock's key (Owner, Token, Acquired and Expires its newest holder).
	Limit   int      `json:"limit,omitempty"`
	InUse   int      `json:"in_use,omitempty"`
	Holders []holder `json:"holders,omitempty"`
}

// holder is one holder of a semaphore's or read-write lock's key.
type holder struct {
	Mode     string     `json:"mode"` // "permits", "read" or "write"
	Weight   int        `json:"weight"`
	Owner    string     `json:"owner"`
	Token    uint64     `json:"token"`
	Acquired *time.Time `json:"acquired,omitempty"`
	Expires  *time.Time `json:"expires,omitempty"`
}

// timePtr is t, or nil when it is zero (unknown).
func timePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// inspectCmd is "lockctl inspect".
func inspectCmd(args []string, stdout, stderr io.Writer) int {
	c := newCLI("inspect", stdout, stderr)
	asJSON := c.fs.Bool("json", false, "print JSON")
	return c.onKey(args, nil, func(ctx context.Context, l locker.Locker, key string) int {
		return c.inspect(ctx, l, key, *asJSON)
	})
}

// inspect prints who holds key.
func (c *cli) inspect(ctx context.Context, l locker.Locker, key string, asJSON bool) int {
	st, err := locker.Inspect(ctx, l, key)
	if err != nil {
		return c.fail(err)
	}
	out := statusOf(locker.KeyStatus{Key: key, Status: st})
	if asJSON {
		enc := json.NewEncoder(c.stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(out); err != nil {
			return c.fail(err)
		}
		return exitOK
	}
	printStatus(c.stdout, out, time.Now())
	return exitOK
}

// printStatus prints s for humans, with times relative to now.
func printStatus(w io.Writer, s status, now time.Time) {
	tw := tabwriter.NewWriter(w, 0, 0, 1, ' ', 0)
	defer tw.Flush()
	fmt.Fprintf(tw, "key:\t%s\n", s.Key)
	if !s.Held {
		fmt.Fprintf(tw, "held:\tno\n")
		if s.Waiters > 0 {
			fmt.Fprintf(tw, "waiters:\t%d\n", s.Waiters)
		}
		return
	}
	fmt.Fprintf(tw, "held:\tyes\n")
	if len(s.Holders) > 0 {
		printShared(tw, s, now)
		return
	}
	fmt.Fprintf(tw, "owner:\t%s\n", s.Owner)
	fmt.Fprintf(tw, "token:\t%d\n", s.Token)
	if s.Acquired != nil {
		fmt.Fprintf(tw, "acquired:\t%s (%v ago)\n", s.Acquired.Format(time.RFC3339), now.Sub(*s.Acquired).Round(time.Second))
	}
	if s.Expires != nil {
		fmt.Fprintf(tw, "expires:\t%s (in %v unless renewed)\n", s.Expires.Format(time.RFC3339), s.Expires.Sub(now).Round(time.Second))
	}
	fmt.Fprintf(tw, "waiters:\t%d\n", s.Waiters)
	if d := s.dataText(); d != "" {
		fmt.Fprintf(tw, "data:\t%s\n", d)
	}
}

// dataText is the holder's data for humans: as it is when it is printable
// text, else quoted; "" for none.
func (s status) dataText() string {
	switch {
	case s.DataBase64 != nil:
		return strconv.Quote(string(s.DataBase64))
	case s.Data == "":
		return ""
	}
	for _, r := range s.Data {
		if !unicode.IsPrint(r) {
			return strconv.Quote(s.Data)
		}
	}
	return s.Data
}

// printShared prints the holders of a semaphore's or read-write lock's key.
func printShared(tw *tabwriter.Writer, s status, now time.Time) {
	if s.Limit > 0 {
		fmt.Fprintf(tw, "kind:\tsemaphore\n")
		fmt.Fprintf(tw, "limit:\t%d\n", s.Limit)
		fmt.Fprintf(tw, "in use:\t%d\n", s.InUse)
	} else {
		fmt.Fprintf(tw, "kind:\tread-write lock\n")
	}
	fmt.Fprintf(tw, "waiters:\t%d\n", s.Waiters)
	fmt.Fprintf(tw, "holders:\t%d\n", len(s.Holders))
	for _, h := range s.Holders {
		expires := "-"
		if h.Expires != nil {
			expires = fmt.Sprintf("in %v", h.Expires.Sub(now).Round(time.Second))
		}
		fmt.Fprintf(tw, "  %s\tweight %d\ttoken %d\texpires %s\t%s\n", h.Mode, h.Weight, h.Token, expires, h.Owner)
	}
}

// unlockCmd is "lockctl unlock --force".
func unlockCmd(args []string, stdout, stderr io.Writer) int {
	c := newCLI("unlock", stdout, stderr)
	force := c.fs.Bool("force", false, "free KEY whoever holds it")
	notForced := func() error {
		if !*force {
			return errors.New("unlock frees KEY whoever holds it, while its holder may still run: say --force")
		}
		return nil
	}
	return c.onKey(args, notForced, c.forceUnlock)
}

// forceUnlock frees key whoever holds it.
func (c *cli) forceUnlock(ctx context.Context, l locker.Locker, key string) int {
	st, _ := locker.Inspect(ctx, l, key) // who it was, for the message only
	if err := locker.ForceUnlock(ctx, l, key); err != nil {
		if errors.Is(err, locker.ErrNotHeld) {
			fmt.Fprintf(c.stderr, "lockctl unlock: nobody holds %s\n", key)
			return exitError
		}
		return c.fail(err)
	}
	if st.Held {
		fmt.Fprintf(c.stdout, "freed %s (was held by %s, token %d)\n", key, st.Label, st.Token)
	} else {
		fmt.Fprintf(c.stdout, "freed %s\n", key)
	}
	return exitOK
}
