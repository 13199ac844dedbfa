#!/bin/sh
# zk-server.sh -- starts, stops and restarts a throwaway ZooKeeper server for the tests.
#
#   zk-server.sh start DIR     start a standalone server on a free 127.0.0.1 port with its
#                              data in DIR (created); prints 127.0.0.1:PORT once it serves.
#                              A later start on the same DIR reuses the port and the data.
#   zk-server.sh stop DIR      stop the server started on DIR (no error if none runs)
#   zk-server.sh restart DIR   stop, then start again on the same port and data
#   zk-server.sh mode DIR      print the server's role: leader, follower, standalone, or none
#                              while it serves no clients (e.g. a member without a quorum)
#
# An ensemble member: before the first start write DIR/port (its client port), DIR/quorum.cfg
# (the server.N lines, initLimit and syncLimit, as this member shall see them) and
# DIR/data/myid; start then returns once the process answers, not once it has a quorum.
# DIR/extra.cfg, if present, is added to the settings at every start (e.g. another
# maxSessionTimeout for a restart).
#
# The server is Debian's `zookeeper` package run directly (ZooKeeperServerMain), so no
# system service, no /etc change and no port outside the loopback address is involved.
# ZK_JAVA_OPTS replaces its JVM options (default: a small heap and a quick start, for tests).
set -eu

die() { echo "zk-server.sh: $*" >&2; exit 1; }

[ $# -eq 2 ] || die "usage: zk-server.sh start|stop|restart|mode DIR"
cmd=$1
dir=$2
ZK_JAR=${ZK_JAR:-/usr/share/java/zookeeper.jar}
ZK_CONF_DIR=${ZK_CONF_DIR:-/etc/zookeeper/conf}

# Prints the role the server reports through srvr, or none.
mode() {
  port=$(cat "$dir/port" 2>/dev/null) || { echo none; return 0; }
  python3 - "$port" <<'PY'
import socket, sys
try:
    s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), 0.5)
    s.sendall(b"srvr")
    out = b""
    while True:
        b = s.recv(4096)
        if not b:
            break
        out += b
    for line in out.decode("utf-8", "replace").splitlines():
        if line.startswith("Mode: "):
            print(line[6:].strip())
            sys.exit(0)
except OSError:
    pass
print("none")
PY
}

# Asks the server whether it is healthy ("ruok" answered with "imok").
ruok() {
  python3 - "$1" <<'PY'
import socket, sys
try:
    s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), 0.5)
    s.sendall(b"ruok")
    sys.exit(0 if s.recv(4) == b"imok" else 1)
except OSError:
    sys.exit(1)
PY
}

# A free port below the kernel's ephemeral range (see free_port.py beside this script).
free_port() {
  python3 "$(dirname "$0")/free_port.py"
}

stop() {
  [ -f "$dir/pid" ] || return 0
  pid=$(cat "$dir/pid")
  rm -f "$dir/pid"
  kill "$pid" 2>/dev/null || return 0
  i=0
  while kill -0 "$pid" 2>/dev/null; do
    i=$((i + 1))
    if [ $i -gt 100 ]; then kill -9 "$pid" 2>/dev/null || true; break; fi
    sleep 0.05
  done
}

start() {
  [ -f "$ZK_JAR" ] || die "$ZK_JAR not found: apt-get install zookeeper"
  command -v java >/dev/null || die "java not found: apt-get install zookeeper (it depends on a JRE)"
  mkdir -p "$dir/data"
  dir=$(cd "$dir" && pwd)
  if [ -f "$dir/pid" ] && kill -0 "$(cat "$dir/pid")" 2>/dev/null; then
    die "a server already runs on $dir (pid $(cat "$dir/pid"))"
  fi
  [ -f "$dir/port" ] || free_port >"$dir/port"
  port=$(cat "$dir/port")
  # tickTime 200 ms lets tests use sessions from 400 ms up to 60 s.
  cat >"$dir/zoo.cfg" <<CFG
tickTime=200
dataDir=$dir/data
clientPort=$port
clientPortAddress=127.0.0.1
minSessionTimeout=400
maxSessionTimeout=60000
admin.enableServer=false
4lw.commands.whitelist=ruok,srvr,mntr,cons
CFG
  # DIR/extra.cfg, when a test writes one, overrides the settings above (a later key wins).
  [ -f "$dir/extra.cfg" ] && cat "$dir/extra.cfg" >>"$dir/zoo.cfg"
  main=org.apache.zookeeper.server.ZooKeeperServerMain
  if [ -f "$dir/quorum.cfg" ]; then
    cat "$dir/quorum.cfg" >>"$dir/zoo.cfg"
    main=org.apache.zookeeper.server.quorum.QuorumPeerMain
  fi
  # shellcheck disable=SC2086 # ZK_JAVA_OPTS is a list of options
  java ${ZK_JAVA_OPTS:--Xmx128m -XX:+UseSerialGC -XX:TieredStopAtLevel=1} \
    -cp "$ZK_CONF_DIR:$ZK_JAR" -Dzookeeper.log.dir="$dir" \
    -Dzookeeper.root.logger=WARN,CONSOLE -Dzookeeper.admin.enableServer=false \
    "$main" "$dir/zoo.cfg" \
    >>"$dir/server.log" 2>&1 </dev/null &
  echo $! >"$dir/pid"
  # A JVM starting on a loaded machine may take a minute: the limit is for a server that
  # never answers, counted in seconds (each try's own time varies with the load).
  started=$(date +%s)
  until ruok "$port"; do
    if ! kill -0 "$(cat "$dir/pid")" 2>/dev/null; then
      rm -f "$dir/pid"
      tail -20 "$dir/server.log" >&2
      die "ZooKeeper exited during start-up (log: $dir/server.log)"
    fi
    [ $(($(date +%s) - started)) -lt 120 ] ||
      { stop; die "ZooKeeper did not answer on 127.0.0.1:$port within 120 s"; }
    sleep 0.1
  done
  echo "127.0.0.1:$port"
}

case $cmd in
  start) start ;;
  stop) stop ;;
  restart) stop; start ;;
  mode) mode ;;
  *) die "unknown command '$cmd' (allowed: start, stop, restart, mode)" ;;
esac
