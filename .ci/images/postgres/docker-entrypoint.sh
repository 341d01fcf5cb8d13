#!/bin/bash
# The official postgres image's entrypoint contract, in short: arguments
# starting with "-" are options of postgres; on the first start, an empty
# PGDATA is initialised (the cluster initdb made at build time, trust
# authentication on loopback; with POSTGRES_HOST_AUTH_METHOD, that method
# for every other host too; the database POSTGRES_DB) without networking;
# then postgres is exec'd as the postgres user with the arguments, so it
# receives the stop signal itself. The command pgbouncer runs as the
# postgres user too.
set -euo pipefail
if [[ "${1:-}" == -* ]]; then
	set -- postgres "$@"
fi
as_postgres=()
if [[ "$(id -u)" == 0 ]]; then
	as_postgres=(setpriv --reuid=postgres --regid=postgres --init-groups)
fi
case "${1:-}" in
pgbouncer) exec "${as_postgres[@]}" "$@" ;;
postgres) shift ;;
*) exec "$@" ;;
esac
log() { echo "entrypoint: $*" >&2; }

if [[ ! -s "$PGDATA/PG_VERSION" ]]; then
	log "initialising $PGDATA"
	cp -a /usr/local/share/postgresql-initdb/. "$PGDATA/"
	if [[ -n "${POSTGRES_HOST_AUTH_METHOD:-}" ]]; then
		echo "host all all all $POSTGRES_HOST_AUTH_METHOD" >>"$PGDATA/pg_hba.conf"
	fi
	if [[ -n "${POSTGRES_DB:-}" && "$POSTGRES_DB" != postgres ]]; then
		# Single-user mode: no networking, so no client sees a server
		# without the database.
		echo "CREATE DATABASE \"${POSTGRES_DB//\"/\"\"}\";" |
			"${as_postgres[@]}" postgres --single -D "$PGDATA" postgres >/dev/null
	fi
	log "initialised"
fi
exec "${as_postgres[@]}" postgres -D "$PGDATA" "$@"
