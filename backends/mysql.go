package backends

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"slices"
	"strings"

	gomysql "github.com/go-sql-driver/mysql"
	gormmysql "gorm.io/driver/mysql"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/golocker/locker"
	"github.com/golocker/locker/mysql"
)

// OpenMySQL opens a MySQL/MariaDB Locker for a mysql:// URL of the form
// mysql://user:password@host:port/database?param=value. Parameters: table
// names the lock table (default mysql.DefaultTable); skip_migration=true and
// poll_only=true set mysql.Config's SkipMigration (for an account without
// CREATE) and PollOnly; the others must be go-sql-driver/mysql DSN
// parameters (parseTime=true is always set). ca_file, cert_file and
// key_file (PEM files) turn TLS on with a private CA and a client
// certificate. Anything else is refused with locker.ErrBadURL: the driver
// would send it to the server as a session variable.
func OpenMySQL(ctx context.Context, u *url.URL, opts ...locker.Option) (l locker.Locker, err error) {
	hs, err := hosts(u)
	if err != nil {
		return nil, err
	}
	if len(hs) != 1 {
		return nil, fmt.Errorf("%w: %s: mysql takes one host", locker.ErrBadURL, u.Redacted())
	}
	q := backendQuery(u)
	tc, err := tlsParams(u, q, "", "ca_file", "cert_file", "key_file")
	if err != nil {
		return nil, err
	}
	cfg := mysql.Config{Table: q.Get("table")}
	q.Del("table")
	var insecure bool
	for name, set := range map[string]*bool{"skip_migration": &cfg.SkipMigration, "poll_only": &cfg.PollOnly, "insecure": &insecure} {
		if *set, err = takeBool(u, q, name); err != nil {
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
	if len(q) > 0 {
		// Let the driver parse and validate its own parameters.
		parsed, err := gomysql.ParseDSN(dsn.FormatDSN() + "&" + q.Encode())
		if err != nil {
			return nil, fmt.Errorf("%w: %s: %v", locker.ErrBadURL, u.Redacted(), err)
		}
		if len(parsed.Params) > 0 {
			names := make([]string, 0, len(parsed.Params))
			for name := range parsed.Params {
				names = append(names, name)
			}
			slices.Sort(names)
			return nil, fmt.Errorf("%w: %s: unknown parameters %s", locker.ErrBadURL, u.Redacted(), strings.Join(names, ", "))
		}
		dsn = parsed
	}
	if tc != nil {
		tc.ServerName, _, _ = strings.Cut(dsn.Addr, ":")
		dsn.TLS = tc
	}
	// tls=preferred falls back to plaintext: not secure.
	secure := tc != nil || dsn.TLSConfig == "true" || dsn.TLSConfig == "skip-verify"
	if err := cleartextPassword(u, hs, secure, insecure); err != nil {
		return nil, err
	}
	// A connector keeps the TLS configuration, which a DSN string cannot
	// carry without the driver's global registry.
	connector, err := gomysql.NewConnector(dsn)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", locker.ErrBadURL, u.Redacted(), err)
	}
	sqlDB := sql.OpenDB(connector)
	defer closeOnError(&err, sqlDB.Close)
	db, err := gorm.Open(gormmysql.New(gormmysql.Config{Conn: sqlDB}), &gorm.Config{Logger: logger.Discard})
	if err != nil {
		return nil, fmt.Errorf("mysql %s: %w", u.Redacted(), err)
	}
	if err := sqlDB.PingContext(ctx); err != nil {
		return nil, fmt.Errorf("mysql %s: %w", u.Redacted(), err)
	}
	return mysql.NewWithConfig(db, cfg, append(opts, locker.WithOnClose(sqlDB.Close))...)
}
