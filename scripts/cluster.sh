#!/usr/bin/env bash
# Several pmhash-servers behind one twemproxy (nutcracker), on this host.
#
#   scripts/cluster.sh start [flags]   start the servers, then the proxy
#   scripts/cluster.sh stop  [--dir D] stop the proxy, then the servers
#
# Two shapes:
#   - shards (default): every server serves a pool file of its own
#     (DIR/shard-N.pool, made on the first start); the proxy spreads keys
#     over them by consistent hashing (ketama over murmur), so each key
#     lives on one server.
#   - shared (--memnodes LIST): every server serves the same index on the
#     memory nodes (sephash or race); the servers are stateless front ends
#     and any of them can answer for any key. The proxy still routes each
#     key to one server, which spreads the load; losing a server loses no
#     data.
#
# Flags of start:
#   --servers N       servers (default 3)
#   --dir DIR         pools, logs, pid files, the proxy's configuration
#                     (default ./data/cluster)
#   --port P          the proxy's port on 127.0.0.1 (default 22121; 0: any free)
#   --engine E        engine of the pools it creates (default: the registry's first)
#   --size S          size of each pool it creates (default 1G)
#   --memnodes LIST   the shared shape, over these memory nodes
#   --server PATH     the pmhash-server binary (default build/release/pmhash-server)
#   --requirepass-file F   servers require this password; the proxy uses it
#
# Everything listens on 127.0.0.1 only (servers on ports of the kernel's
# choosing, the proxy's statistics too). DIR/cluster.env names the ports
# afterwards (PROXY_PORT, SERVER_PORTS), for scripts and tests.
set -euo pipefail
cd "$(dirname "$0")/.."

usage() {
  echo "usage: $0 start [--servers N] [--dir DIR] [--port P] [--engine E] [--size S]" \
    "[--memnodes LIST] [--server PATH] [--requirepass-file F] | stop [--dir DIR]" >&2
  exit 2
}

[ $# -ge 1 ] || usage
action=$1
shift
servers=3
dir=./data/cluster
port=22121
engine=
size=1G
memnodes=
server=build/release/pmhash-server
passfile=
while [ $# -gt 0 ]; do
  case $1 in
    --servers) servers=$2 ;;
    --dir) dir=$2 ;;
    --port) port=$2 ;;
    --engine) engine=$2 ;;
    --size) size=$2 ;;
    --memnodes) memnodes=$2 ;;
    --server) server=$2 ;;
    --requirepass-file) passfile=$2 ;;
    *) usage ;;
  esac
  shift 2 || usage
done

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# wait_for FILE PATTERN PID: until FILE has a line matching PATTERN; fails
# when PID exits first or 30 s pass.
wait_for() {
  local file=$1 pattern=$2 pid=$3
  for _ in $(seq 300); do
    if grep -q "$pattern" "$file" 2>/dev/null; then return 0; fi
    if ! kill -0 "$pid" 2>/dev/null; then
      echo "cluster: process $pid exited: $(cat "$file")" >&2
      return 1
    fi
    sleep 0.1
  done
  echo "cluster: no '$pattern' in $file after 30 s" >&2
  return 1
}

stop_pid_file() {
  local f=$1
  [ -f "$f" ] || return 0
  local pid
  pid=$(cat "$f")
  if kill -TERM "$pid" 2>/dev/null; then
    for _ in $(seq 300); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
  fi
  rm -f "$f"
}

case $action in
  stop)
    stop_pid_file "$dir/nutcracker.pid"
    for f in "$dir"/server-*.pid; do
      [ -e "$f" ] && stop_pid_file "$f"
    done
    echo "cluster: stopped ($dir)"
    exit 0
    ;;
  start) ;;
  *) usage ;;
esac

if [ ! -x "$server" ]; then
  echo "cluster: $server is missing (make build-release)" >&2
  exit 1
fi
command -v nutcracker >/dev/null || { echo "cluster: nutcracker is missing (scripts/bootstrap.sh)" >&2; exit 1; }
mkdir -p "$dir"
[ "$port" = 0 ] && port=$(free_port)
stats_port=$(free_port)

common=(--port 0)
[ -n "$passfile" ] && common+=(--requirepass-file "$passfile")
ports=()
for i in $(seq 1 "$servers"); do
  if [ -n "$memnodes" ]; then
    # The first server makes the index if the nodes hold none; the others
    # start after it is ready, and open it.
    args=(--memnodes "$memnodes" --create)
  else
    args=(--pool "$dir/shard-$i.pool" --create --size "$size")
  fi
  [ -n "$engine" ] && args+=(--engine "$engine")
  log=$dir/server-$i.log
  "$server" "${args[@]}" "${common[@]}" >"$log" 2>&1 &
  pid=$!
  echo "$pid" >"$dir/server-$i.pid"
  wait_for "$log" "ready on 127.0.0.1:" "$pid"
  ports+=("$(sed -n 's/.*ready on 127\.0\.0\.1:\([0-9]*\).*/\1/p' "$log")")
done

conf=$dir/nutcracker.yml
{
  echo "pmhash:"
  echo "  listen: 127.0.0.1:$port"
  echo "  hash: murmur"
  echo "  distribution: ketama"
  echo "  redis: true"
  echo "  auto_eject_hosts: false"
  [ -n "$passfile" ] && echo "  redis_auth: $(head -n 1 "$passfile")"
  echo "  servers:"
  for i in $(seq 1 "$servers"); do
    echo "    - 127.0.0.1:${ports[$((i - 1))]}:1 shard-$i"
  done
} >"$conf"
[ -n "$passfile" ] && chmod 600 "$conf"

nutcracker -c "$conf" -a 127.0.0.1 -s "$stats_port" -p "$dir/nutcracker.pid.own" \
  -o "$dir/nutcracker.log" &
proxy=$!
echo "$proxy" >"$dir/nutcracker.pid"
# Ready when its port accepts a connection.
for _ in $(seq 300); do
  if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then break; fi
  if ! kill -0 "$proxy" 2>/dev/null; then
    echo "cluster: nutcracker exited: $(cat "$dir/nutcracker.log")" >&2
    exit 1
  fi
  sleep 0.1
done

{
  echo "PROXY_PORT=$port"
  echo "SERVER_PORTS=\"${ports[*]}\""
} >"$dir/cluster.env"
shape=shards
[ -n "$memnodes" ] && shape="one index on $memnodes"
echo "cluster: nutcracker on 127.0.0.1:$port in front of $servers servers (${ports[*]}; $shape); stop: $0 stop --dir $dir"
