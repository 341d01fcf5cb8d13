package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// CreateTableSQL returns the DDL of lock table table, the statement New
// runs unless Config.SkipMigration is set.
func CreateTableSQL(table string) string { return createTableSQL(table) }

func createTableSQL(table string) string {
	return "CREATE TABLE IF NOT EXISTS " + quoteIdent(table) + " (\n" +
		"  task_name   text        PRIMARY KEY,\n" +
		"  task_status text        NOT NULL CHECK (task_status IN ('RUNNING', 'FINISH')),\n" +
		"  version     bigint      NOT NULL,\n" +
		"  owner_token text        NOT NULL,\n" +
		"  owner_label text        NOT NULL,\n" +
		"  lock_until  timestamptz NOT NULL,\n" +
		"  start_time  timestamptz,\n" +
		"  finish_time timestamptz,\n" +
		"  update_time timestamptz NOT NULL,\n" +
		"  lock_data   bytea\n" +
		")"
}

// AddDataColumnSQL returns the DDL that adds lock_data (locker.WithData)
// to a lock table created before it, the statement New runs unless
// Config.SkipMigration is set.
func AddDataColumnSQL(table string) string {
	return "ALTER TABLE " + quoteIdent(table) + " ADD COLUMN IF NOT EXISTS lock_data bytea"
}

// requiredColumns are the columns the driver reads and writes.
var requiredColumns = []string{
	"task_name", "task_status", "version", "owner_token", "owner_label",
	"lock_until", "start_time", "finish_time", "update_time", "lock_data",
}

// migrate creates table with ddl unless it exists. Two sessions creating
// it at once may collide on the catalog (unique_violation,
// duplicate_table, duplicate_object for the table's row type): the table
// then exists, which checkTable confirms.
func migrate(ctx context.Context, q querier, table, ddl string) error {
	_, err := q.exec(ctx, ddl)
	var pe *pgconn.PgError
	if errors.As(err, &pe) && (pe.Code == "23505" || pe.Code == "42P07" || pe.Code == "42710") {
		return nil
	}
	if err != nil {
		return fmt.Errorf("create table %s: %w", table, err)
	}
	return addDataColumn(ctx, q, table)
}

// addDataColumn adds lock_data to a lock table made before it; it leaves
// a table of another shape to checkTable. The ALTER TABLE, which waits for
// every transaction on the table, runs only when the column is missing.
func addDataColumn(ctx context.Context, q querier, table string) error {
	have, err := columns(ctx, q, table)
	if err != nil || slices.Contains(have, "lock_data") {
		return err
	}
	for _, c := range requiredColumns {
		if c != "lock_data" && !slices.Contains(have, c) {
			return nil
		}
	}
	_, err = q.exec(ctx, AddDataColumnSQL(table))
	var pe *pgconn.PgError
	if errors.As(err, &pe) && (pe.Code == "23505" || pe.Code == "42701") {
		return nil // added by another session meanwhile
	}
	if err != nil {
		return fmt.Errorf("add column lock_data to %s: %w", table, err)
	}
	return nil
}

// checkTable verifies that the table exists in the current schema with the
// columns the driver needs.
func checkTable(ctx context.Context, q querier, table string) error {
	have, err := columns(ctx, q, table)
	if err != nil {
		return err
	}
	if len(have) == 0 {
		return fmt.Errorf("table %s does not exist in the current schema (Config.SkipMigration is set: create it with CreateTableSQL)", table)
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
		return fmt.Errorf("table %s lacks the columns %s: it was not created by this package; choose another Config.Table",
			table, strings.Join(missing, ", "))
	}
	return nil
}

// columns returns the names of table's columns in the current schema,
// lower case; none when it does not exist.
func columns(ctx context.Context, q querier, table string) ([]string, error) {
	var have []string
	err := q.query(ctx, "SELECT column_name::text FROM information_schema.columns WHERE table_schema = current_schema() AND table_name = $1",
		[]any{table}, func(scan func(...any) error) error {
			var c string
			if err := scan(&c); err != nil {
				return err
			}
			have = append(have, strings.ToLower(c))
			return nil
		})
	if err != nil {
		return nil, fmt.Errorf("check table %s: %w", table, err)
	}
	return have, nil
}
