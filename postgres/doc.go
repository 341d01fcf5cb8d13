// Package postgres is a locker backend on PostgreSQL through pgx v5.
package postgres
