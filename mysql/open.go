package mysql

import (
	"context"
	"database/sql"
	"net/url"
	"slices"
	"strings"

	gomysql "github.com/go-sql-driver/mysql"
	gormmysql "gorm.io/driver/mysql"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/golocker/locker"
	"github.com/golocker/locker/driver/lockurl"
)

// Open opens a MySQL/MariaDB Locker for a mysql:// URL of the form
// mysql://user:password@host:port/database?param=value; it is the
// [locker.OpenFunc] of that scheme:
//
//	var mux locker.Mux
//	err := mux.Register("mysql", mysql.Open)
//	l, err := locker.Open(ctx, &mux, "mysql://app:pw@127.0.0.1:3306/app?table=my_locks")
//
// Parameters: table names the lock table (default [DefaultTable]);
// skip_migration=true and poll_only=true set [Config]'s SkipMigration (for
// an account without CREATE) and PollOnly; the others must be
// go-sql-driver/mysql DSN parameters (parseTime=true is always set).
// ca_file, cert_file and key_file (PEM files) turn TLS on with a private CA
// and a client certificate. Anything else is refused with
// [locker.ErrBadURL]: the driver would send it to the server as a session
// variable. A password goes to a host other than this machine only over TLS,
// or with insecure=true. The Locker owns its connection pool: its Close
// closes it.
func Open(ctx context.Context, u *url.URL, opts ...locker.Option) (l locker.Locker, err error) {
	p := lockurl.Parse(u)
	hs, err := p.Hosts()
	if err != nil {
		return nil, err
	}
	if len(hs) != 1 {
		return nil, p.Errorf("mysql takes one host")
	}
	tc, err := p.TLS("", "ca_file", "cert_file", "key_file")
	if err != nil {
		return nil, err
	}
	cfg := Config{}
	cfg.Table, _ = p.Take("table")
	var insecure bool
	for name, set := range map[string]*bool{"skip_migration": &cfg.SkipMigration, "poll_only": &cfg.PollOnly, "insecure": &insecure} {
		if *set, err = p.Bool(name); err != nil {
			return nil, err
		}
	}
	dsn := gomysql.NewConfig()
	dsn.Net = "tcp"
	dsn.Addr = hs[0]
	dsn.DBName = strings.TrimPrefix(u.Path, "/")
	if u.User != nil {
		dsn.User = u.User.Username()
		dsn.Passwd, _ = u.User.Password()
	}
	dsn.ParseTime = true
	if q := p.Rest(); len(q) > 0 {
		// Let the driver parse and validate its own parameters.
		parsed, err := gomysql.ParseDSN(dsn.FormatDSN() + "&" + q.Encode())
		if err != nil {
			return nil, p.Errorf("%v", err)
		}
		if len(parsed.Params) > 0 {
			names := make([]string, 0, len(parsed.Params))
			for name := range parsed.Params {
				names = append(names, name)
			}
			slices.Sort(names)
			return nil, p.Errorf("unknown parameters %s", strings.Join(names, ", "))
		}
		dsn = parsed
	}
	if tc != nil {
		tc.ServerName, _, _ = strings.Cut(dsn.Addr, ":")
		dsn.TLS = tc
	}
	// tls=preferred falls back to plaintext: not secure.
	secure := tc != nil || dsn.TLSConfig == "true" || dsn.TLSConfig == "skip-verify"
	if err := p.CheckPassword(hs, secure, insecure); err != nil {
		return nil, err
	}
	// A connector keeps the TLS configuration, which a DSN string cannot
	// carry without the driver's global registry.
	connector, err := gomysql.NewConnector(dsn)
	if err != nil {
		return nil, p.Errorf("%v", err)
	}
	sqlDB := sql.OpenDB(connector)
	defer func() {
		if err != nil {
			_ = sqlDB.Close()
		}
	}()
	db, err := gorm.Open(gormmysql.New(gormmysql.Config{Conn: sqlDB}), &gorm.Config{Logger: logger.Discard})
	if err != nil {
		return nil, p.Wrap("mysql", err)
	}
	if err := sqlDB.PingContext(ctx); err != nil {
		return nil, p.Wrap("mysql", err)
	}
	return cfg.New(db, append(opts, locker.WithOnClose(sqlDB.Close))...)
}
