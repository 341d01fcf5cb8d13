package redis

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/golocker/locker/driver"
)

// List implements driver.Lister with SCAN: one SCAN call per page, with
// MATCH on the lock names of the prefix and COUNT limit, then the page's
// locks read in one pipeline. Both name forms (see KeysOf) of the plain
// locks, then of the shared holds' holds hashes, are scanned in turn, and on
// a Cluster every primary in turn. The cursor is
// "<primary>:<form>:<SCAN cursor>". As SCAN does, it may yield a key twice
// when Redis resizes its table during the listing, or when it turns from a
// plain lock into a shared one meanwhile.
func (d *redisDriver) List(ctx context.Context, prefix, cursor string, limit int) ([]driver.KeyStatus, string, error) {
	nodes, err := d.scanners(ctx)
	if err != nil {
		return nil, "", err
	}
	names, form, _, next, err := scanPage(ctx, nodes, prefix, cursor, limit)
	if err != nil {
		return nil, "", err
	}
	if form >= 2 {
		page, err := d.readShared(ctx, names, form)
		return page, next, err
	}
	page, err := d.readLocks(ctx, names, form)
	return page, next, err
}

// scanPage runs the SCAN call of the page cursor names, on nodes, and
// returns the lock names it found, their form and node, and the cursor of
// the next page.
func scanPage(ctx context.Context, nodes []scanFunc, prefix, cursor string, limit int) (names []string, form, node int, next string, err error) {
	node, form, scan, err := parseListCursor(cursor)
	if err != nil {
		return nil, 0, 0, "", err
	}
	if node >= len(nodes) {
		return nil, 0, 0, "", nil // the Cluster lost primaries since the last page
	}
	match := []string{namespace + "{" + globEscape(prefix) + "*}", namespace + hashTagGlob + kindLock + ":" + globEscape(prefix) + "*",
		namespace + "{" + globEscape(prefix) + "*}:" + kindShareHolds, namespace + hashTagGlob + kindShareHolds + ":" + globEscape(prefix) + "*"}
	names, scan, err = nodes[node](ctx, scan, match[form], int64(max(limit, 1)))
	if err != nil {
		return nil, 0, 0, "", fmt.Errorf("list: %w", classify(err))
	}
	switch {
	case scan != 0:
		next = fmt.Sprintf("%d:%d:%d", node, form, scan)
	case form < lastForm:
		next = fmt.Sprintf("%d:%d:0", node, form+1)
	case node+1 < len(nodes):
		next = fmt.Sprintf("%d:0:0", node+1)
	}
	return names, form, node, next, nil
}

// readLocks reads the locks named names (of the given form) in one
// pipeline, and returns the held ones.
func (d *redisDriver) readLocks(ctx context.Context, names []string, form int) ([]driver.KeyStatus, error) {
	return d.readPage(ctx, names, kindLock, form, func(pipe goredis.Pipeliner, ks Keys) func(time.Time) (driver.Status, error) {
		get, pttl, queued := pipe.Get(ctx, ks.Lock), pipe.PTTL(ctx, ks.Lock), pipe.ZCard(ctx, ks.Queue)
		return func(now time.Time) (driver.Status, error) {
			v, err := get.Result()
			return lockStatus(v, errors.Is(err, goredis.Nil), pttl.Val(), queued.Val(), now)
		}
	})
}

// lastForm is the last name form List scans: 0 and 1 are the plain locks'
// names without and with a hashed tag, 2 and 3 the shared holds hashes'.
const lastForm = 3

// readShared reads the keys of shared holds whose holds hashes are named
// names (of the given form) in one pipeline, and returns the held ones.
func (d *redisDriver) readShared(ctx context.Context, names []string, form int) ([]driver.KeyStatus, error) {
	return d.readPage(ctx, names, kindShareHolds, form-2, func(pipe goredis.Pipeliner, ks Keys) func(time.Time) (driver.Status, error) {
		shared := readSharedOn(ctx, pipe, ks)
		return func(now time.Time) (driver.Status, error) {
			st, _, err := shared.status(now)
			return st, err
		}
	})
}

// readPage reads the keys whose Redis names of kind and form are names, in
// one pipeline, and returns the held ones. For each key, read adds its
// reads to the pipeline and returns what makes its Status from them once
// the pipeline ran, at the server's time.
func (d *redisDriver) readPage(ctx context.Context, names []string, kind string, form int,
	read func(goredis.Pipeliner, Keys) func(now time.Time) (driver.Status, error)) ([]driver.KeyStatus, error) {
	if len(names) == 0 {
		return nil, nil
	}
	slices.Sort(names)
	names = slices.Compact(names)
	pipe := d.client.Pipeline()
	type pending struct {
		key    string
		status func(time.Time) (driver.Status, error)
	}
	reads := make([]pending, 0, len(names))
	for _, n := range names {
		if key, ok := storeKeyOf(n, kind, form); ok {
			reads = append(reads, pending{key: key, status: read(pipe, KeysOf(key))})
		}
	}
	now := pipe.Time(ctx)
	if _, err := pipe.Exec(ctx); pipeErr(err) != nil {
		return nil, fmt.Errorf("list: %w", classify(err))
	}
	page := make([]driver.KeyStatus, 0, len(reads))
	for _, r := range reads {
		st, err := r.status(now.Val())
		if err != nil {
			return nil, fmt.Errorf("list: %s: %w", r.key, err)
		}
		if st.Held {
			page = append(page, driver.KeyStatus{Key: r.key, Status: st})
		}
	}
	return page, nil
}

// storeKeyOf is the store key of a Redis name of the given kind (kindLock
// or kindShareHolds) and form (0: plain tag, 1: hashed tag), and whether
// name is one.
func storeKeyOf(n, kind string, form int) (string, bool) {
	if form == 0 {
		suffix := "}"
		if kind != kindLock {
			suffix = "}:" + kind
		}
		s, ok := strings.CutPrefix(n, namespace+"{")
		s, ok2 := strings.CutSuffix(s, suffix)
		return s, ok && ok2 && strings.IndexByte(s, '}') < 0
	}
	tag := len(namespace + "#{0123456789abcdef}:" + kind + ":")
	if len(n) < tag || !strings.HasPrefix(n, namespace+"#{") {
		return "", false
	}
	s := n[tag:]
	return s, name(kind, s) == n
}

// scanFunc runs one SCAN on one node.
type scanFunc func(ctx context.Context, cursor uint64, match string, count int64) ([]string, uint64, error)

// scanners returns a SCAN per node to list: every primary of a Cluster,
// ordered by address, or the one node of any other client.
func (d *redisDriver) scanners(ctx context.Context) ([]scanFunc, error) {
	cc, ok := d.client.(*goredis.ClusterClient)
	if !ok {
		return []scanFunc{pipelineScan(d.client)}, nil
	}
	var mu sync.Mutex
	var masters []*goredis.Client
	err := cc.ForEachMaster(ctx, func(_ context.Context, c *goredis.Client) error {
		mu.Lock()
		masters = append(masters, c)
		mu.Unlock()
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list: %w", classify(err))
	}
	slices.SortFunc(masters, func(a, b *goredis.Client) int { return strings.Compare(a.Options().Addr, b.Options().Addr) })
	fns := make([]scanFunc, len(masters))
	for i, c := range masters {
		fns[i] = func(ctx context.Context, cursor uint64, match string, count int64) ([]string, uint64, error) {
			return c.Scan(ctx, cursor, match, count).Result()
		}
	}
	return fns, nil
}

// pipelineScan is a SCAN through a pipeline of c, for a client of one node
// that offers nothing more (Client, Master).
func pipelineScan(c interface{ Pipeline() goredis.Pipeliner }) scanFunc {
	return func(ctx context.Context, cursor uint64, match string, count int64) ([]string, uint64, error) {
		pipe := c.Pipeline()
		cmd := pipe.Scan(ctx, cursor, match, count)
		if _, err := pipe.Exec(ctx); err != nil {
			return nil, 0, err
		}
		return cmd.Result()
	}
}

// parseListCursor splits a cursor made by List; "" is the start.
func parseListCursor(cursor string) (node, form int, scan uint64, err error) {
	if cursor == "" {
		return 0, 0, 0, nil
	}
	parts := strings.Split(cursor, ":")
	if len(parts) == 3 {
		node, err = strconv.Atoi(parts[0])
		if err == nil {
			form, err = strconv.Atoi(parts[1])
		}
		if err == nil {
			scan, err = strconv.ParseUint(parts[2], 10, 64)
		}
		if err == nil && node >= 0 && form >= 0 && form <= lastForm {
			return node, form, scan, nil
		}
	}
	return 0, 0, 0, fmt.Errorf("list: malformed cursor %q", cursor)
}
