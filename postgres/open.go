package postgres

import (
	"context"
	"net/url"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/golocker/locker"
	"github.com/golocker/locker/driver/lockurl"
)

// Open opens a PostgreSQL Locker for a postgres:// or postgresql:// URL of
// the form postgres://user:password@host:port/database?param=value; it is
// the [locker.OpenFunc] of those schemes:
//
//	var mux locker.Mux
//	err := mux.Register("postgres", postgres.Open)
//	l, err := locker.Open(ctx, &mux, "postgres://app:pw@127.0.0.1:5432/app?table=my_locks")
//
// Parameters: table names the lock table (default [DefaultTable]);
// skip_migration=true and poll_only=true set [Config]'s SkipMigration and
// PollOnly. The others go to pgx as its connection string's (sslmode,
// pool_max_conns, default_query_exec_mode, …; pgx sends names it does not
// know to the server as run-time parameters). A password goes to a host
// other than this machine only with sslmode=require, verify-ca or
// verify-full, or with insecure=true. The Locker owns its pool: its Close
// closes it.
func Open(ctx context.Context, u *url.URL, opts ...locker.Option) (locker.Locker, error) {
	p := lockurl.Parse(u)
	hs, err := p.Hosts()
	if err != nil {
		return nil, err
	}
	cfg := Config{}
	cfg.Table, _ = p.Take("table")
	if cfg.Table != "" {
		if err := validTable(cfg.Table); err != nil {
			return nil, p.Errorf("%v", err)
		}
	}
	var insecure bool
	for name, set := range map[string]*bool{"skip_migration": &cfg.SkipMigration, "poll_only": &cfg.PollOnly, "insecure": &insecure} {
		if *set, err = p.Bool(name); err != nil {
			return nil, err
		}
	}
	rest := p.Rest()
	switch rest.Get("sslmode") {
	case "require", "verify-ca", "verify-full":
		if err := p.CheckPassword(hs, true, insecure); err != nil {
			return nil, err
		}
	default: // disable, allow and prefer may all end in plaintext
		if err := p.CheckPassword(hs, false, insecure); err != nil {
			return nil, err
		}
	}
	pu := *u
	pu.Scheme = "postgres"
	pu.RawQuery = rest.Encode()
	pc, err := pgxpool.ParseConfig(pu.String())
	if err != nil {
		return nil, p.Errorf("%v", locker.RedactURL(err, pu.String()))
	}
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, p.Wrap("postgres", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, p.Wrap("postgres", err)
	}
	l, err := NewWithConfig(pool, cfg, append(opts, locker.WithOnClose(func() error { pool.Close(); return nil }))...)
	if err != nil {
		pool.Close()
		return nil, err
	}
	return l, nil
}
