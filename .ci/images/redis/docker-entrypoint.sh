#!/bin/sh
# The official redis image's entrypoint contract: a first argument that is an
# option (or a .conf file) runs redis-server with the arguments; redis-server
# runs as the redis user with protected mode off unless the arguments say
# otherwise. The command is exec'd, so it receives the stop signal itself.
set -e
if [ "${1#-}" != "$1" ] || [ "${1%.conf}" != "$1" ]; then
	set -- redis-server "$@"
fi
if [ "$1" = redis-server ]; then
	shift
	set -- redis-server --protected-mode no "$@"
	if [ "$(id -u)" = 0 ]; then
		exec setpriv --reuid=redis --regid=redis --init-groups "$@"
	fi
fi
exec "$@"
