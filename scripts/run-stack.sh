#!/usr/bin/env bash
# shellcheck disable=SC2317  # functions run from traps and eval look unreachable to it
# Runs a whole local runstream stack for development (`make run`):
#
#   1. npm ci (when node_modules is missing or stale) and npm run build;
#   2. unless NATS_URL is set: a nats-server with JetStream on 127.0.0.1:${RS_NATS_PORT:-4223},
#      data in .data/nats, log .data/nats.log;
#   3. unless DATABASE_URL is set: a Postgres from /usr/lib/postgresql/<newest>/bin on
#      127.0.0.1:${RS_PG_PORT:-5433}, data in .data/pg, log .data/pg.log, database `runstream`;
#   4. the broker (GRPC_PORT 50051, HTTP_PORT 8080 unless set), log .data/broker.log;
#   5. the demo agent, publishing a run every few seconds on `demo-thread`;
#   6. the viewer's URL (the broker serves the page at /), open on the demo thread.
#
# Missing nats-server / postgresql are installed with apt-get when running as root;
# otherwise the script says what to install. A broker that dies is started again (so
# `kill -9 $(cat .data/broker.pid)` shows clients resuming). Ctrl-C (or SIGTERM) stops
# everything it started, broker first. Re-running reuses .data; whatever a killed earlier
# run left behind (found by its pid file) is stopped first.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
DATA="$ROOT/.data"
NATS_PORT="${RS_NATS_PORT:-4223}"
PG_PORT="${RS_PG_PORT:-5433}"
export GRPC_PORT="${GRPC_PORT:-50051}"
export HTTP_PORT="${HTTP_PORT:-8080}"
# A dev stack has no auth: keep it on loopback unless told otherwise.
export RS_HOST="${RS_HOST:-127.0.0.1}"
DEMO_THREAD="${RS_DEMO_THREAD:-demo-thread}"
DEMO_INTERVAL_MS="${RS_DEMO_INTERVAL_MS:-3000}"
READY_TIMEOUT_S=60

if [[ -t 1 ]]; then B=$'\e[1m' R=$'\e[0m'; else B='' R=''; fi
say() { printf '%s[run-stack]%s %s\n' "$B" "$R" "$*"; }
die() {
  say "error: $*" >&2
  exit 1
}
is_root() { [[ $EUID -eq 0 ]]; }

APT_UPDATED=0
apt_install() {
  if ! is_root; then
    die "$* is not installed. Install it with: sudo apt-get install -y $*  (or set $INSTEAD)"
  fi
  command -v apt-get >/dev/null || die "$* is not installed and there is no apt-get here (or set $INSTEAD)"
  say "installing $* with apt-get"
  if ((!APT_UPDATED)); then
    apt-get update -qq
    APT_UPDATED=1
  fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@"
}

# true when something accepts TCP connections on 127.0.0.1:$1
port_busy() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# true when GET http://127.0.0.1:$1$2 answers 200 (no curl on a fresh machine)
http_ok() {
  (
    exec 3<>"/dev/tcp/127.0.0.1/$1" || exit 1
    printf 'GET %s HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n' "$2" >&3
    IFS= read -r -t 2 status <&3 || exit 1
    [[ $status == *' 200 '* ]]
  ) 2>/dev/null
}

alive() { [[ -n ${1:-} ]] && kill -0 "$1" 2>/dev/null; }

# Sends SIGTERM, waits up to $3 seconds (less after a second Ctrl-C), then SIGKILL.
stop_pid() {
  local name=$1 pid=$2 timeout_s=$3 i
  alive "$pid" || return 0
  kill -TERM "$pid" 2>/dev/null || return 0
  for ((i = 0; i < timeout_s * 10; i++)); do
    alive "$pid" || return 0
    ((FORCE)) && break
    sleep 0.1
  done
  say "$name did not stop in time: SIGKILL"
  kill -KILL "$pid" 2>/dev/null || true
}

# A process a killed earlier run left behind: stopped only if its pid file names it and
# its command line and working directory still say it is ours.
stop_leftover() {
  local name=$1 pidfile=$2 pattern=$3 pid
  [[ -f $pidfile ]] || return 0
  pid=$(<"$pidfile")
  if [[ $pid =~ ^[0-9]+$ ]] && alive "$pid" &&
    tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q -- "$pattern" &&
    [[ $(readlink "/proc/$pid/cwd" 2>/dev/null) == "$ROOT"* ]]; then
    say "stopping the $name left over from an earlier run (pid $pid)"
    stop_pid "$name" "$pid" 15
  fi
  rm -f "$pidfile"
}

# Waits until $3 (a command) succeeds while process $2 lives. Fails (status 1) when the
# process exits first, dies on a timeout; either way shows the end of its log $4 (from
# byte $5 on, so an appended log shows only this start's lines).
wait_until() {
  local name=$1 pid=$2 check=$3 log=$4 from=${5:-0} i
  for ((i = 0; i < READY_TIMEOUT_S * 10; i++)); do
    if ! alive "$pid"; then
      tail -c +$((from + 1)) "$log" | tail -n 30 >&2 || true
      say "$name exited during start-up (log: $log)"
      return 1
    fi
    eval "$check" && return 0
    sleep 0.1
  done
  tail -c +$((from + 1)) "$log" | tail -n 30 >&2 || true
  die "$name not ready after ${READY_TIMEOUT_S}s (log: $log)"
}
log_size() { stat -c %s "$1" 2>/dev/null || echo 0; }

NATS_PID='' BROKER_PID='' DEMO_PID='' SLEEP_PID='' PG_STARTED=0 FORCE=0 CLEANED=0 PGDATA='' PG_BIN='' INSTEAD=''

as_pg() {
  if is_root; then runuser -u postgres -- "$@"; else "$@"; fi
}

cleanup() {
  ((CLEANED)) && return
  CLEANED=1
  # A second Ctrl-C while stopping skips the grace periods.
  trap 'FORCE=1' INT TERM
  [[ -z $SLEEP_PID ]] || kill "$SLEEP_PID" 2>/dev/null || true
  if [[ -n $DEMO_PID$BROKER_PID$NATS_PID ]] || ((PG_STARTED)); then say 'stopping...'; fi
  stop_pid 'demo agent' "$DEMO_PID" 5
  stop_pid broker "$BROKER_PID" 20
  stop_pid nats-server "$NATS_PID" 10
  if ((PG_STARTED)); then
    if ((FORCE)) || ! as_pg "$PG_BIN/pg_ctl" -D "$PGDATA" -m fast -w -t 30 stop >/dev/null 2>&1; then
      as_pg "$PG_BIN/pg_ctl" -D "$PGDATA" -m immediate -w stop >/dev/null 2>&1 || true
    fi
  fi
  rm -f "$DATA/demo.pid" "$DATA/broker.pid"
  [[ -z $NATS_PID ]] || rm -f "$DATA/nats.pid"
  if [[ -n $DEMO_PID$BROKER_PID$NATS_PID ]] || ((PG_STARTED)); then say 'stopped everything started here'; fi
}
trap cleanup EXIT
trap 'exit 0' INT TERM

# One stack per .data: a second `make run` would take the first one's pid files for leftovers.
# Children get `9>&-` so a killed script's survivors do not keep holding the lock.
mkdir -p "$DATA"
exec 9>>"$DATA/run-stack.lock"
if ! flock -n 9; then
  die "another run-stack.sh is already running on $DATA (stop it with Ctrl-C first)"
fi

# --- 1. build -------------------------------------------------------------------------
"$ROOT/scripts/deps.sh" npm
say 'building'
npm run --silent build
stop_leftover 'demo agent' "$DATA/demo.pid" 'dist/src/cli/demo-agent.js'
stop_leftover broker "$DATA/broker.pid" 'dist/src/main.js'

# --- 2. NATS --------------------------------------------------------------------------
if [[ -z ${NATS_URL:-} ]]; then
  INSTEAD='NATS_URL to a running nats-server with JetStream'
  find_nats() { command -v nats-server || { [[ -x /usr/sbin/nats-server ]] && echo /usr/sbin/nats-server; } || true; }
  NATS_BIN=$(find_nats)
  if [[ -z $NATS_BIN ]]; then
    apt_install nats-server
    NATS_BIN=$(find_nats)
    [[ -n $NATS_BIN ]] || die 'nats-server still not found after installing it'
  fi
  stop_leftover nats-server "$DATA/nats.pid" nats-server
  port_busy "$NATS_PORT" && die "port $NATS_PORT is taken; set RS_NATS_PORT=<free port>, or NATS_URL to use that server"
  mkdir -p "$DATA/nats"
  say "starting nats-server on 127.0.0.1:$NATS_PORT (JetStream in .data/nats, log .data/nats.log)"
  # setsid: a Ctrl-C on the terminal reaches only this script, which stops things in order.
  setsid "$NATS_BIN" -a 127.0.0.1 -p "$NATS_PORT" -js -sd "$DATA/nats" -P "$DATA/nats.pid" \
    >>"$DATA/nats.log" 2>&1 </dev/null 9>&- &
  NATS_PID=$!
  wait_until nats-server "$NATS_PID" "port_busy $NATS_PORT" "$DATA/nats.log" "$(log_size "$DATA/nats.log")" ||
    exit 1
  export NATS_URL="nats://127.0.0.1:$NATS_PORT"
fi

# --- 3. Postgres ----------------------------------------------------------------------
if [[ -z ${DATABASE_URL:-} ]]; then
  INSTEAD='DATABASE_URL to a running Postgres'
  PGDATA="$DATA/pg"
  newest_pg_bin() { printf '%s\n' /usr/lib/postgresql/*/bin | sort -V | tail -n 1; }
  PG_BIN=$(newest_pg_bin)
  if [[ -z $PG_BIN || ! -x $PG_BIN/postgres ]]; then
    apt_install postgresql
    PG_BIN=$(newest_pg_bin)
    [[ -n $PG_BIN && -x $PG_BIN/postgres ]] || die 'no /usr/lib/postgresql/*/bin/postgres after installing postgresql'
  fi
  # An existing cluster must be run by its own major version.
  if [[ -f $PGDATA/PG_VERSION ]]; then
    cluster_version=$(<"$PGDATA/PG_VERSION")
    if [[ -x /usr/lib/postgresql/$cluster_version/bin/postgres ]]; then
      PG_BIN=/usr/lib/postgresql/$cluster_version/bin
    else
      die "$PGDATA holds a Postgres $cluster_version cluster but only $PG_BIN is installed; remove .data/pg to start afresh"
    fi
  fi
  mkdir -p "$PGDATA"
  touch "$DATA/pg.log"
  if is_root; then
    # initdb and postgres refuse to run as root: they run as the postgres user.
    id postgres >/dev/null 2>&1 || die 'there is no postgres user (installing postgresql creates it)'
    chown postgres:postgres "$PGDATA" "$DATA/pg.log"
    as_pg test -w "$PGDATA" ||
      die "the postgres user cannot reach $PGDATA (is a parent directory private?); move the repo or set DATABASE_URL"
  fi
  chmod 700 "$PGDATA"
  if [[ ! -f $PGDATA/PG_VERSION ]]; then
    say "initialising a Postgres $(basename "$(dirname "$PG_BIN")") cluster in .data/pg"
    as_pg "$PG_BIN/initdb" -D "$PGDATA" -U postgres -A trust -E UTF8 --locale=C >>"$DATA/pg.log" 2>&1 ||
      die "initdb failed (log: $DATA/pg.log)"
  fi
  if as_pg "$PG_BIN/pg_ctl" -D "$PGDATA" status >/dev/null 2>&1; then
    say 'stopping the Postgres left over from an earlier run'
    as_pg "$PG_BIN/pg_ctl" -D "$PGDATA" -m fast -w stop >/dev/null
  fi
  port_busy "$PG_PORT" && die "port $PG_PORT is taken; set RS_PG_PORT=<free port>, or DATABASE_URL to use that server"
  say "starting Postgres on 127.0.0.1:$PG_PORT (data .data/pg, log .data/pg.log)"
  PG_STARTED=1
  as_pg "$PG_BIN/pg_ctl" -D "$PGDATA" -l "$DATA/pg.log" -w -t "$READY_TIMEOUT_S" \
    -o "-p $PG_PORT -c listen_addresses=127.0.0.1 -c unix_socket_directories=''" start >/dev/null 9>&- ||
    { tail -n 30 "$DATA/pg.log" >&2; die "Postgres did not start (log: $DATA/pg.log)"; }
  psql_admin() { "$PG_BIN/psql" -X -q -t -A -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$PG_PORT" -U postgres -d postgres "$@"; }
  if [[ $(psql_admin -c "SELECT 1 FROM pg_database WHERE datname = 'runstream'") != 1 ]]; then
    say 'creating database runstream'
    psql_admin -c 'CREATE DATABASE runstream'
  fi
  export DATABASE_URL="postgres://postgres@127.0.0.1:$PG_PORT/runstream"
fi

# --- 4. broker ------------------------------------------------------------------------
for port in "$GRPC_PORT" "$HTTP_PORT"; do
  port_busy "$port" && die "port $port is taken (another broker?); set GRPC_PORT / HTTP_PORT to free ports"
done
BROKER_STARTED_AT=0
# Starts the broker and waits for /readyz; fails if it exits first.
start_broker() {
  local from
  from=$(log_size "$DATA/broker.log")
  # Readable lines for a person reading the log (RS_LOG_FORMAT=json: JSON, the default elsewhere).
  RS_LOG_FORMAT="${RS_LOG_FORMAT:-pretty}" setsid node dist/src/main.js >>"$DATA/broker.log" 2>&1 </dev/null 9>&- &
  BROKER_PID=$!
  BROKER_STARTED_AT=$SECONDS
  echo "$BROKER_PID" >"$DATA/broker.pid"
  wait_until broker "$BROKER_PID" "http_ok $HTTP_PORT /readyz" "$DATA/broker.log" "$from"
}
say "starting the broker (gRPC $RS_HOST:$GRPC_PORT, HTTP $RS_HOST:$HTTP_PORT, log .data/broker.log)"
start_broker || exit 1

# --- 5. demo agent --------------------------------------------------------------------
setsid node dist/src/cli/demo-agent.js --target "127.0.0.1:$GRPC_PORT" --thread "$DEMO_THREAD" \
  --interval-ms "$DEMO_INTERVAL_MS" </dev/null 9>&- &
DEMO_PID=$!
echo "$DEMO_PID" >"$DATA/demo.pid"

LOGS='.data/broker.log'
[[ -z $NATS_PID ]] || LOGS+=' .data/nats.log'
((!PG_STARTED)) || LOGS+=' .data/pg.log'
TAIL_URL=''
[[ $HTTP_PORT == 8080 ]] || TAIL_URL=" --url ws://127.0.0.1:$HTTP_PORT/v1/ws"
cat <<EOF

${B}runstream is up${R}
  viewer       ${B}http://127.0.0.1:$HTTP_PORT/?thread=$DEMO_THREAD${R}
  gRPC ingest  127.0.0.1:$GRPC_PORT
  WebSocket    ws://127.0.0.1:$HTTP_PORT/v1/ws
  NATS         $NATS_URL
  Postgres     $DATABASE_URL
  logs         $LOGS
  demo agent   a run every ~$((DEMO_INTERVAL_MS / 1000))s on thread $DEMO_THREAD (its log lines follow)

${B}Watch it${R} in the viewer (the URL above), or from another terminal:
  npm run tail -- $DEMO_THREAD$TAIL_URL
  curl localhost:$HTTP_PORT/v1/threads/$DEMO_THREAD/events

To watch a client resume across a broker crash: kill -9 \$(cat .data/broker.pid)
(this script starts the broker again). Ctrl-C stops everything started here.

EOF

# Stay up while everything runs; `wait` returns at once when a signal arrives. A broker
# that dies is started again (that is how to watch clients resume: kill -9 the broker),
# unless it keeps dying right after start-up.
QUICK_CRASHES=0
while alive "$DEMO_PID" && { [[ -z $NATS_PID ]] || alive "$NATS_PID"; } &&
  { ((!PG_STARTED)) || alive "$(head -n 1 "$PGDATA/postmaster.pid" 2>/dev/null)"; }; do
  if ! alive "$BROKER_PID"; then
    status=0
    wait "$BROKER_PID" 2>/dev/null || status=$?
    if ((SECONDS - BROKER_STARTED_AT < 10)); then QUICK_CRASHES=$((QUICK_CRASHES + 1)); else QUICK_CRASHES=0; fi
    if ((QUICK_CRASHES >= 3)); then
      die 'the broker keeps exiting right after start-up (log: .data/broker.log)'
    fi
    say "the broker exited (status $status); starting it again"
    if start_broker; then say 'the broker is ready again'; fi
    continue
  fi
  sleep 1 &
  SLEEP_PID=$!
  wait "$SLEEP_PID" || true
done
alive "$DEMO_PID" || say 'the demo agent exited'
[[ -z $NATS_PID ]] || alive "$NATS_PID" || say 'nats-server exited (log: .data/nats.log)'
((!PG_STARTED)) || alive "$(head -n 1 "$PGDATA/postmaster.pid" 2>/dev/null)" || say 'Postgres exited (log: .data/pg.log)'
exit 1
