//go:build unix

package main

import (
	"context"

	gomysql "github.com/go-sql-driver/mysql"
	goredis "github.com/redis/go-redis/v9"
)

// quietClients silences the package-level loggers of the store clients,
// which print retries and pool events to stderr: lockctl reports the
// errors that matter itself, one line each.
func quietClients() {
	goredis.SetLogger(discard{})
	_ = gomysql.SetLogger(discard{})
}

// discard is a logger of both clients that prints nothing.
type discard struct{}

func (discard) Printf(context.Context, string, ...any) {}
func (discard) Print(...any)                           {}
