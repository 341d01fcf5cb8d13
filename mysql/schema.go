package mysql

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"
)

// CreateTableSQL returns the DDL of lock table table, the statement New
// runs unless Config.SkipMigration is set: for a DBA who creates the table
// for an account without CREATE. The package doc shows the same columns.
func CreateTableSQL(table string) string { return createTableSQL(table) }

// createTableSQL returns the DDL of the lock table; the package doc shows it
// for the default name.
func createTableSQL(table string) string {
	return "CREATE TABLE IF NOT EXISTS `" + table + "` (\n" +
		"  `task_name`   VARBINARY(255)  NOT NULL COMMENT 'lock key, Locker prefix included; compared byte by byte',\n" +
		"  `task_status` VARCHAR(16)     NOT NULL COMMENT 'RUNNING while held, FINISH once released',\n" +
		"  `version`     BIGINT UNSIGNED NOT NULL COMMENT 'fencing token of the latest acquisition',\n" +
		"  `owner_token` VARBINARY(64)   NOT NULL COMMENT 'random token of the holder (per acquisition)',\n" +
		"  `owner_label` VARCHAR(255)    NOT NULL COMMENT 'human-readable holder, e.g. host:pid',\n" +
		"  `lock_until`  DATETIME(6)     NOT NULL COMMENT 'UTC; the claim ends then unless renewed',\n" +
		"  `start_time`  DATETIME(6)     NULL     COMMENT 'UTC; start of the latest run',\n" +
		"  `finish_time` DATETIME(6)     NULL     COMMENT 'UTC; release of the latest run, NULL while running or if it never released',\n" +
		"  `update_time` DATETIME(6)     NOT NULL COMMENT 'UTC; last acquisition, renewal or release',\n" +
		"  " + dataColumnDDL + ",\n" +
		"  PRIMARY KEY (`task_name`)\n" +
		") ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COMMENT='github.com/golocker/locker/mysql'"
}

// dataColumnDDL is the definition of lock_data, the last column, which
// tables created before it get from migrate.
const dataColumnDDL = "`lock_data`   VARBINARY(1024) NULL     COMMENT 'locker.WithData of the latest holder; NULL when none'"

// AddDataColumnSQL returns the DDL that adds lock_data to a lock table
// created before it, the statement New runs unless Config.SkipMigration is
// set.
func AddDataColumnSQL(table string) string {
	return "ALTER TABLE `" + table + "` ADD COLUMN " + strings.Join(strings.Fields(dataColumnDDL), " ")
}

// requiredColumns are the columns the driver reads and writes.
var requiredColumns = []string{
	"task_name", "task_status", "version", "owner_token", "owner_label",
	"lock_until", "start_time", "finish_time", "update_time", "lock_data",
}

// migrate creates the table unless it exists, and adds lock_data to a
// table made before it. CREATE TABLE IF NOT EXISTS is atomic in MySQL and
// MariaDB: replicas starting at once all succeed and exactly one creates
// the table. Of replicas adding lock_data at once, all but one fail with
// a duplicate column, which means it is there.
func migrate(ctx context.Context, db *sql.DB, table string) error {
	if _, err := db.ExecContext(ctx, createTableSQL(table)); err != nil {
		return fmt.Errorf("create table %s: %w", table, err)
	}
	have, err := columns(ctx, db, table)
	if err != nil || slices.Contains(have, "lock_data") {
		return err
	}
	for _, c := range requiredColumns {
		if c != "lock_data" && !slices.Contains(have, c) {
			return nil // not ours: checkTable says so
		}
	}
	if _, err := db.ExecContext(ctx, AddDataColumnSQL(table)); err != nil {
		if have, cerr := columns(ctx, db, table); cerr == nil && slices.Contains(have, "lock_data") {
			return nil
		}
		return fmt.Errorf("add column lock_data to %s: %w", table, err)
	}
	return nil
}

// checkTable verifies that the table exists in the current database with the
// columns the driver needs, so that a missing table or one of another shape
// (for example an older hand-made distribute_task_lock) fails New with a
// clear message instead of failing every Lock.
func checkTable(ctx context.Context, db *sql.DB, table string) error {
	have, err := columns(ctx, db, table)
	if err != nil {
		return err
	}
	if len(have) == 0 {
		return fmt.Errorf("table %s does not exist in the current database (Config.SkipMigration is set: create it with the DDL in the package doc)", table)
	}
	var missing []string
	for _, c := range requiredColumns {
		if !slices.Contains(have, c) {
			missing = append(missing, c)
		}
	}
	if len(missing) == 1 && missing[0] == "lock_data" {
		return fmt.Errorf("table %s lacks the column lock_data, which this version needs: add it with %s (New does, unless Config.SkipMigration is set)", table, AddDataColumnSQL(table))
	}
	if len(missing) > 0 {
		return fmt.Errorf("table %s lacks the columns %s: it was not created by this package; migrate it to the DDL in the package doc or choose another Config.Table",
			table, strings.Join(missing, ", "))
	}
	return nil
}

// columns returns the names of table's columns in the current database,
// lower case; none when it does not exist.
func columns(ctx context.Context, db *sql.DB, table string) ([]string, error) {
	rows, err := db.QueryContext(ctx,
		"SELECT COLUMN_NAME FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ?", table)
	if err != nil {
		return nil, fmt.Errorf("check table %s: %w", table, err)
	}
	defer rows.Close()
	var have []string
	for rows.Next() {
		var c string
		if err := rows.Scan(&c); err != nil {
			return nil, fmt.Errorf("check table %s: %w", table, err)
		}
		have = append(have, strings.ToLower(c))
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("check table %s: %w", table, err)
	}
	return have, nil
}

// server is what the driver needs to know about the server.
type server struct {
	database string // the current database, which named-lock names include
	mariaDB  bool   // GET_LOCK takes fractional timeouts (MariaDB 10.1.2+)
}

// serverInfo returns the current database (an error when none is selected)
// and the server's flavour, in one round trip.
func serverInfo(ctx context.Context, db *sql.DB) (server, error) {
	var name sql.NullString
	var version string
	if err := db.QueryRowContext(ctx, "SELECT DATABASE(), VERSION()").Scan(&name, &version); err != nil {
		return server{}, fmt.Errorf("select database: %w", err)
	}
	if !name.Valid || name.String == "" {
		return server{}, fmt.Errorf("no database selected: name one in the DSN")
	}
	return server{database: name.String, mariaDB: strings.Contains(version, "MariaDB")}, nil
}
