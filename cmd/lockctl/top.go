//go:build unix

package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/golocker/locker"
)

// defaultRefresh is how often top reads the store again.
const defaultRefresh = time.Second

// topCmd is "lockctl top".
func topCmd(args []string, stdout, stderr io.Writer) int {
	c := newCLI("top", stdout, stderr)
	every := c.fs.Duration("interval", defaultRefresh, "time between refreshes")
	return c.onPrefix(args, func(ctx context.Context, l locker.Locker, prefix string) int {
		if *every <= 0 {
			return c.usageError(fmt.Errorf("--interval %v is not positive", *every))
		}
		return c.top(ctx, l, prefix, *every, os.Stdin)
	})
}

// top shows the keys held under prefix, refreshed every interval, until q
// is typed on in or ctx ends (Ctrl-C).
func (c *cli) top(ctx context.Context, l locker.Locker, prefix string, every time.Duration, in *os.File) int {
	restore := cbreak(in)
	defer restore()
	quit := make(chan struct{})
	go readQuit(in, quit)
	fmt.Fprint(c.stdout, "\x1b[?1049h\x1b[?25l") // the alternate screen, no cursor
	defer fmt.Fprint(c.stdout, "\x1b[?25h\x1b[?1049l")
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		rows, cols := termSize(c.stdout)
		frame, err := c.topFrame(ctx, l, prefix, rows, cols, every)
		if errors.Is(err, errors.ErrUnsupported) {
			restore()
			fmt.Fprint(c.stdout, "\x1b[?25h\x1b[?1049l")
			return c.fail(fmt.Errorf("this store cannot list its keys: %w", err))
		}
		_, _ = io.WriteString(c.stdout, frame)
		select {
		case <-ctx.Done():
			return exitOK
		case <-quit:
			return exitOK
		case <-tick.C:
		}
	}
}

// readQuit closes quit when q (or Q) is read from in.
func readQuit(in io.Reader, quit chan<- struct{}) {
	buf := make([]byte, 64)
	for {
		n, err := in.Read(buf)
		if bytes.ContainsAny(buf[:n], "qQ") {
			close(quit)
			return
		}
		if err != nil {
			return // no keyboard: Ctrl-C still ends top
		}
	}
}

// topRows orders keys as top shows them: most waiters first, then the
// longest held (unknown acquisition last), then by key.
func topRows(a, b locker.KeyStatus) int {
	if a.Waiters != b.Waiters {
		return b.Waiters - a.Waiters
	}
	switch az, bz := a.Acquired.IsZero(), b.Acquired.IsZero(); {
	case az != bz && az:
		return 1
	case az != bz:
		return -1
	case !a.Acquired.Equal(b.Acquired):
		return a.Acquired.Compare(b.Acquired)
	}
	return strings.Compare(a.Key, b.Key)
}

// topFrame reads the store and renders one screen of rows lines and cols
// columns: a header, then the first keys in top's order. It keeps at most
// twice the screen's keys in memory however many are held.
func (c *cli) topFrame(ctx context.Context, l locker.Locker, prefix string, rows, cols int, every time.Duration) (string, error) {
	show := max(rows-3, 1)
	var keys []locker.KeyStatus
	held, waiting := 0, 0
	var listErr error
	for ks, err := range locker.List(ctx, l, prefix) {
		if err != nil {
			listErr = err
			break
		}
		held++
		waiting += ks.Waiters
		keys = append(keys, ks)
		if len(keys) >= 2*show {
			slices.SortFunc(keys, topRows)
			keys = keys[:show]
		}
	}
	if errors.Is(listErr, errors.ErrUnsupported) {
		return "", listErr
	}
	slices.SortFunc(keys, topRows)
	keys = keys[:min(len(keys), show)]
	now := time.Now()
	var b bytes.Buffer
	where := prefix
	if where == "" {
		where = "all keys"
	}
	fmt.Fprintf(&b, "lockctl top: %s: %d held, %d waiting; %s, every %v; q quits\n", where, held, waiting, now.Format(time.TimeOnly), every)
	if listErr != nil {
		fmt.Fprintf(&b, "error: %s\n", c.text(listErr))
	} else {
		b.WriteString("\n")
	}
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "KEY\tOWNER\tTOKEN\tHELD FOR\tEXPIRES IN\tWAITERS")
	for _, ks := range keys {
		s := statusOf(ks)
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%d\n", s.Key, orDash(s.Owner), s.Token, since(s.Acquired, now), until(s.Expires, now), s.Waiters)
	}
	_ = tw.Flush()
	var screen strings.Builder
	screen.WriteString("\x1b[H")
	for line := range strings.Lines(b.String()) {
		line = strings.TrimSuffix(line, "\n")
		if len(line) > cols {
			line = line[:cols]
		}
		screen.WriteString(line + "\x1b[K\r\n")
	}
	screen.WriteString("\x1b[J")
	return screen.String(), nil
}
