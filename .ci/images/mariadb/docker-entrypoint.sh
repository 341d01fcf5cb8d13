#!/bin/bash
# The official mariadb image's entrypoint contract, in short: arguments
# starting with "-" are options of mariadbd; on the first start, an empty
# datadir is initialised (system tables, then root with MARIADB_ROOT_PASSWORD
# or, with MARIADB_ALLOW_EMPTY_ROOT_PASSWORD, without a password, reachable
# from any host; MARIADB_DATABASE; MARIADB_USER with MARIADB_PASSWORD) by
# mariadbd --bootstrap, without networking; then mariadbd is exec'd with the
# arguments, so it receives the stop signal itself.
set -euo pipefail
if [[ "${1:-}" == -* ]]; then
	set -- mariadbd "$@"
fi
if [[ "${1:-}" != mariadbd && "${1:-}" != mysqld ]]; then
	exec "$@"
fi
shift
datadir=/var/lib/mysql
log() { echo "entrypoint: $*" >&2; }

if [[ ! -d "$datadir/mysql" ]]; then
	root_password="${MARIADB_ROOT_PASSWORD:-}"
	if [[ -z "$root_password" && ! "${MARIADB_ALLOW_EMPTY_ROOT_PASSWORD:-}" =~ ^(1|yes|true)$ ]]; then
		log "error: the database is uninitialized and neither MARIADB_ROOT_PASSWORD nor MARIADB_ALLOW_EMPTY_ROOT_PASSWORD is set"
		exit 1
	fi
	log "initialising $datadir"
	# The system tables made at build time (what mariadb-install-db would
	# make here, in a fraction of the time).
	cp -a /usr/local/share/mariadb-initdb/. "$datadir/"
	quote() { local s=${1//\\/\\\\}; printf "'%s'" "${s//\'/\\\'}"; }
	{
		echo "FLUSH PRIVILEGES;" # loads the grant tables in bootstrap mode
		echo "DELETE FROM mysql.global_priv WHERE User='' OR (User='root' AND Host NOT IN ('localhost'));"
		echo "FLUSH PRIVILEGES;"
		echo "CREATE USER 'root'@'%' IDENTIFIED BY $(quote "$root_password");"
		echo "GRANT ALL ON *.* TO 'root'@'%' WITH GRANT OPTION;"
		echo "ALTER USER 'root'@'localhost' IDENTIFIED BY $(quote "$root_password");"
		if [[ -n "${MARIADB_DATABASE:-}" ]]; then
			echo "CREATE DATABASE IF NOT EXISTS \`${MARIADB_DATABASE//\`/\`\`}\`;"
		fi
		if [[ -n "${MARIADB_USER:-}" ]]; then
			echo "CREATE USER $(quote "$MARIADB_USER")@'%' IDENTIFIED BY $(quote "${MARIADB_PASSWORD:-}");"
			if [[ -n "${MARIADB_DATABASE:-}" ]]; then
				echo "GRANT ALL ON \`${MARIADB_DATABASE//\`/\`\`}\`.* TO $(quote "$MARIADB_USER")@'%';"
			fi
		fi
	} | mariadbd --user=mysql --datadir="$datadir" --bootstrap --log-warnings=0 >/dev/null
	log "initialised"
fi
exec mariadbd --user=mysql --datadir="$datadir" "$@"
