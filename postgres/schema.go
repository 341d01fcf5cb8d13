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
		"  update_time timestamptz NOT NULL\n" +
		")"
}

// requiredColumns are the columns the driver reads and writes.
var requiredColumns = []string{
	"task_name", "task_status", "version", "owner_token", "owner_label",
	"lock_until", "start_time", "finish_time", "update_time",
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
	return nil
}

// checkTable verifies that the table exists in the current schema with the
// columns the driver needs.
func checkTable(ctx context.Context, q querier, table string) error {
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
		return fmt.Errorf("check table %s: %w", table, err)
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
	if len(missing) > 0 {
		return fmt.Errorf("table %s lacks the columns %s: it was not created by this package; choose another Config.Table",
			table, strings.Join(missing, ", "))
	}
	return nil
}
