#!/bin/sh
# zkServer.sh start-foreground, as the official image runs it: the quorum
# peer main class (standalone when one server is configured) on
# $ZOO_CONF_DIR/zoo.cfg, exec'd so that the JVM receives the stop signal.
set -e
if [ "${1:-}" != start-foreground ]; then
	echo "zkServer.sh: this image supports start-foreground only" >&2
	exit 2
fi
cp=/usr/share/java/zookeeper.jar:/usr/share/java/slf4j-simple.jar
# shellcheck disable=SC2086 # JVMFLAGS is a list of options
exec java $JVMFLAGS -Djava.net.preferIPv4Stack=true -Dzookeeper.log.dir="$ZOO_LOG_DIR" \
	-cp "$cp" org.apache.zookeeper.server.quorum.QuorumPeerMain "$ZOO_CONF_DIR/zoo.cfg"
