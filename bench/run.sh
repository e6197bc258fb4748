#!/usr/bin/env bash
# Orderly's benchmarks on this machine's PostgreSQL (127.0.0.1:5432, user
# postgres, trust auth). Method and figures: BENCHMARKS.md.
#
#   bash bench/run.sh            # = load: the load benchmark, one table (about 10 minutes)
#   bash bench/run.sh gobench    # Go benchmarks of ./service/ (round trips and commits per op)
#   bash bench/run.sh storm      # the long storm (12 000 logical operations)
#   bash bench/run.sh all        # load, gobench and storm
#
# load runs on a PostgreSQL server of its own (initdb in a temporary
# directory, as the OS user postgres when run as root; PostgreSQL's default
# settings plus pg_stat_statements; removed at the end: the machine's shared
# server is neither used nor changed), on one fresh database. For each
# client count C of CLIENTS:
#   create(gc=on)   orderd with ORDERD_GROUP_COMMIT=true:  wrk, then the Go client
#   create(gc=off)  orderd with ORDERD_GROUP_COMMIT=false: wrk, then the Go client
#   replay, pay     orderd with its defaults: a setup step (wrk, not measured)
#                   makes orders with keys; wrk replays those keys and pays
#                   those orders; then the Go client (orderstorm -mode bench,
#                   which makes its own orders and replays and pays them)
#   pgbench         bench/create.sql, replay.sql, pay.sql, -M prepared, C clients
# then create(sqlite): wrk creates at SQLITE_CLIENTS against an orderd on its
# embedded store (no database URL, a temporary data dir). Every orderd uses
# the built-in payment simulator, the development API key and a pool of its
# default size; every phase lasts BENCH_DURATION. The table gives req/s (2xx
# answers only), p50/p99 latency, pgbench's tps for the same SQL, their
# ratio, orderd's and PostgreSQL's CPU per request in µs (PostgreSQL: the
# client backends of the run's database and the server's background
# processes, per-process /proc deltas; backends that exit during a phase
# are counted to their end through the postmaster's reaped-children time),
# PostgreSQL's CPU per transaction of the same SQL under pgbench, and the
# CPU orderd, PostgreSQL and the load generator used during the phase (% of
# one core). pgbench has rows of its own too.
#
# Settings (environment):
#   CLIENTS=4,16,64  BENCH_DURATION=10s  SQLITE_CLIENTS=16
#   OUT=bench/results (git-ignored; logs in $OUT/load-logs, every phase's
#                    top statements in $OUT/statements/)
#   PHASES=create,replay,pay,pgbench,sqlite   the phases to run (a subset:
#                    PHASES=pay,pgbench measures pay beside pgbench only)
#   STATEMENTS=1     print every phase's top statements (pg_stat_statements,
#                    orderd's background workers' included: calls per
#                    request, execution and planning µs, buffers, WAL);
#                    STATEMENTS_TOP=12 rows
#   EXPLAIN=1        EXPLAIN (ANALYZE, BUFFERS) of bench/pay.sql's statements
#                    ($OUT/explain-pay.txt), and auto_explain on the server
#                    for a sample (EXPLAIN_SAMPLE=0.02) of every statement,
#                    background workers' too ($OUT/auto-explain.txt, with a
#                    digest: samples and scan nodes per statement); its
#                    overhead is in that run's CPU figures
#   PGBIN=/usr/lib/postgresql/N/bin   the server programs (default: newest)
#   PROFILE=1        CPU profile of orderd during one wrk phase, with its
#                    `go tool pprof -top` lines: PROFILE_PHASE=create(gc=on)
#                    (or create(gc=off), replay, pay, create(sqlite)) at
#                    PROFILE_CLIENTS=16; orderd serves pprof on loopback
#                    (ORDERD_PPROF_ADDR, cmd/orderd/profile.go)
#   storm: STORM_OPS=12000 STORM_DURATION=15m KILL_EVERY=20s (0: none) SHOPPERS=16
#          STORM_STORE=postgres (2 orderd) or sqlite (1 orderd on the embedded store)
#          STORM_REPLICA=1: on PostgreSQL, a primary and a standby of the run's
#                   own (internal/pgpair, as .ci/replicas), the standby
#                   STORM_REPLICA_DELAY=2s behind, as both orderd's read
#                   replica; 0: the machine's server, no replica
#          STORM_BUS=0.25: the fraction of pays, fulfils and cancels sent as
#                   NATS JetStream commands (127.0.0.1:4222)
#          Every entry point is in it: HTTP through fault proxies, webhooks
#          out to orderstorm's receiver, paysim's provider webhooks in
#          (duplicated, reordered, dropped), bus commands raced by HTTP
#          twins; orderstorm -require-all-checks fails the run (exit 1) on
#          any anomaly and on any invariant that did not run.
# gobench uses the machine's server on 127.0.0.1:5432; storm too with
# STORM_REPLICA=0.
# Other ORDERD_* variables in the environment reach orderd, except those the
# benchmark sets (address, database, data dir, API keys, payment and
# warehouse URLs, log level, group commit, pprof).
set -euo pipefail
cd "$(dirname "$0")/.."

WHAT="${1:-load}"
case "$WHAT" in
  load|bench) WHAT=load ;;
  gobench|storm|all) ;;
  *) echo "usage: $0 [load|gobench|storm|all]" >&2; exit 2 ;;
esac
OUT="${OUT:-bench/results}"
CLIENTS="${CLIENTS:-4,16,64}"
BENCH_DURATION="${BENCH_DURATION:-10s}"
SQLITE_CLIENTS="${SQLITE_CLIENTS:-16}"
PROFILE="${PROFILE:-0}"
PROFILE_PHASE="${PROFILE_PHASE:-create(gc=on)}"
PROFILE_CLIENTS="${PROFILE_CLIENTS:-16}"
STATEMENTS="${STATEMENTS:-0}"
STATEMENTS_TOP="${STATEMENTS_TOP:-12}"
EXPLAIN="${EXPLAIN:-0}"
EXPLAIN_SAMPLE="${EXPLAIN_SAMPLE:-0.02}"
PHASES=",${PHASES:-create,replay,pay,pgbench,sqlite},"
STORM_OPS="${STORM_OPS:-12000}"
STORM_DURATION="${STORM_DURATION:-15m}"
KILL_EVERY="${KILL_EVERY:-20s}"
SHOPPERS="${SHOPPERS:-16}"
STORM_STORE="${STORM_STORE:-postgres}"
STORM_REPLICA="${STORM_REPLICA:-1}"
STORM_REPLICA_DELAY="${STORM_REPLICA_DELAY:-2s}"
STORM_BUS="${STORM_BUS:-0.25}"
case "$STORM_STORE" in postgres|sqlite) ;; *) echo "STORM_STORE must be postgres or sqlite, not $STORM_STORE" >&2; exit 2 ;; esac
PG="postgres://postgres@127.0.0.1:5432"

SECS="${BENCH_DURATION%s}"
if ! [[ "$SECS" =~ ^[0-9]+$ ]] || [ "$SECS" -lt 1 ] || [ "$SECS" -gt 600 ]; then
  echo "BENCH_DURATION must be whole seconds from 1s to 600s, not $BENCH_DURATION" >&2; exit 2
fi
IFS=, read -r -a CLIENT_LIST <<<"$CLIENTS"
for c in "${CLIENT_LIST[@]}" "$SQLITE_CLIENTS"; do
  if ! [[ "$c" =~ ^[0-9]+$ ]] || [ "$c" -lt 1 ] || [ "$c" -gt 1000 ]; then
    echo "client counts must be integers from 1 to 1000, not $c" >&2; exit 2
  fi
done
# The setup step of replay and pay runs half a phase: a create costs far
# less than a pay, so it makes several times the orders a pay phase takes.
SETUP_SECS=$(( SECS / 2 > 2 ? SECS / 2 : 2 ))

tree_before="$(git status --porcelain 2>/dev/null || true)"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/orderly-bench.XXXXXX")"
BIN="$WORK/bin"
mkdir -p "$BIN" "$OUT"
DBS=()
ORDERD_PID=""
PAIR_PID=""
PROFILE_PID=""
LOAD_PID=""

# stop_orderd stops the orderd this script started last, if any: SIGTERM,
# then SIGKILL after 25 s.
stop_orderd() {
  [ -n "$ORDERD_PID" ] || return 0
  kill -TERM "$ORDERD_PID" 2>/dev/null || true
  for _ in $(seq 1 125); do kill -0 "$ORDERD_PID" 2>/dev/null || break; sleep 0.2; done
  kill -KILL "$ORDERD_PID" 2>/dev/null || true
  wait "$ORDERD_PID" 2>/dev/null || true
  ORDERD_PID=""
}

cleanup() {
  local status=$?
  trap - EXIT INT TERM
  set +e # clean up as much as possible whatever fails
  [ -n "$PROFILE_PID" ] && kill "$PROFILE_PID" 2>/dev/null
  if [ -n "$LOAD_PID" ]; then # /usr/bin/time → timeout → the load generator
    pkill -TERM -P "$LOAD_PID" 2>/dev/null
    kill -TERM "$LOAD_PID" 2>/dev/null
  fi
  stop_orderd
  if [ -n "$PAIR_PID" ]; then # pgpair stops and removes its two servers on SIGTERM
    kill -TERM "$PAIR_PID" 2>/dev/null
    for _ in $(seq 1 300); do kill -0 "$PAIR_PID" 2>/dev/null || break; sleep 0.2; done
  fi
  for db in "${DBS[@]}"; do dropdb --if-exists --force -h 127.0.0.1 -p "${db%%:*}" -U postgres "${db#*:}" 2>/dev/null || true; done
  declare -F stop_bench_pg >/dev/null && stop_bench_pg
  rm -rf "$WORK"
  if [ "$(git status --porcelain 2>/dev/null || true)" != "$tree_before" ]; then
    echo "WARNING: the git work tree changed during the run (OUT=$OUT inside the tree and not ignored?)" >&2
  fi
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# need TOOL DEBIAN_PACKAGE: finds TOOL, or installs it with apt-get when run
# as root, or says how.
need() {
  command -v "$1" >/dev/null && return 0
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "== $1 not found: apt-get install -y $2"
    if { apt-get install -y "$2" || { apt-get update && apt-get install -y "$2"; }; } >"$WORK/apt-$2.log" 2>&1; then
      return 0
    fi
    tail -n 5 "$WORK/apt-$2.log" >&2
  fi
  echo "$1 is needed: install it (Debian/Ubuntu: sudo apt-get install -y $2) and run again" >&2
  exit 2
}

PGBENCH=""
if [ "$WHAT" = load ] || [ "$WHAT" = all ]; then
  need wrk wrk
  need jq jq
  PGBENCH="$(command -v pgbench || true)"
  for p in /usr/lib/postgresql/*/bin/pgbench; do [ -z "$PGBENCH" ] && [ -x "$p" ] && PGBENCH="$p"; done
  if [ -z "$PGBENCH" ]; then
    need pgbench postgresql-contrib
    PGBENCH="$(command -v pgbench)"
  fi
fi

if ! pg_isready -q -h 127.0.0.1 -p 5432 2>/dev/null; then
  pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql)" main start || true
  for _ in $(seq 1 30); do pg_isready -q -h 127.0.0.1 -p 5432 && break; sleep 1; done
fi

# fresh_db NAME creates a database for one step (dropped on exit) and sets
# URL. Not in a subshell, so that the trap sees DBS.
# DB_PORT is the server's: the machine's (5432), or the load benchmark's
# own while it runs.
URL="" DB_PORT=5432 DB_NAME=""
fresh_db() {
  local db="orderly_bench_$1_$$"
  dropdb --if-exists --force -h 127.0.0.1 -p "$DB_PORT" -U postgres "$db" 2>/dev/null
  createdb -h 127.0.0.1 -p "$DB_PORT" -U postgres "$db"
  DBS+=("$DB_PORT:$db")
  DB_NAME="$db"
  URL="postgres://postgres@127.0.0.1:$DB_PORT/$db?sslmode=disable"
}

echo "== build"
go build -o "$BIN/orderd" ./cmd/orderd
go build -o "$BIN/paysim" ./cmd/paysim
go build -o "$BIN/orderstorm" ./cmd/orderstorm
{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD 2>/dev/null || echo ' + uncommitted changes')"
  echo "go: $(go version)"
  echo "cpu: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')"
  [ "$WHAT" = load ] || echo "postgres (gobench, storm): $(psql -h 127.0.0.1 -U postgres -Atc 'show server_version') (synchronous_commit=$(psql -h 127.0.0.1 -U postgres -Atc 'show synchronous_commit'), shared_buffers=$(psql -h 127.0.0.1 -U postgres -Atc 'show shared_buffers'))"
  if [ -n "$PGBENCH" ]; then
    echo "pgbench: $("$PGBENCH" --version)"
    echo "wrk: $(wrk -v 2>&1 | head -n1 | cut -d' ' -f1-2)"
  fi
  echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
} | tee "$OUT/machine-$WHAT.txt"
# Benchmarks on 2 cores are only meaningful on an otherwise idle machine.
others="$(pgrep -f 'go test|\.test -test\.|pgbench|wrk ' | grep -v "^$$\$" || true)"
if [ -n "$others" ]; then
  echo "WARNING: other test or benchmark processes are running; figures will be low and noisy:" | tee -a "$OUT/machine-$WHAT.txt"
  # shellcheck disable=SC2086 # one pid per word
  ps -o pid,etime,args -p $others | tee -a "$OUT/machine-$WHAT.txt" || true
fi

# ---------------------------------------------------------------- load ----

HZ="$(getconf CLK_TCK)"
TIME_BIN=""
[ -x /usr/bin/time ] && /usr/bin/time -f '%U' -o /dev/null true 2>/dev/null && TIME_BIN=/usr/bin/time

# ------------------------------------------- the benchmark's own server ----
# start_bench_pg makes a PostgreSQL server for the load benchmark: initdb in
# a directory of its own (owned by the OS user postgres: the server refuses
# to run as root), a free loopback port, PostgreSQL's default settings (as
# the machine's server: synchronous_commit=on, shared_buffers=128MB, fsync
# on) plus pg_stat_statements (and auto_explain with EXPLAIN=1). Sets
# BPG_PORT and BPG_PID (the postmaster). stop_bench_pg stops it and removes
# its directory.
BPG_DIR="" BPG_PORT="" BPG_PID=""
as_postgres() {
  if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}
start_bench_pg() {
  local bin="${PGBIN:-}" port libs
  if [ -z "$bin" ]; then
    bin="$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n1)"
    [ -n "$bin" ] || bin="$(dirname "$(command -v initdb 2>/dev/null || echo /nonexistent/initdb)")"
  fi
  if [ ! -x "$bin/initdb" ] || [ ! -x "$bin/pg_ctl" ]; then
    echo "the load benchmark starts its own PostgreSQL: initdb and pg_ctl not found (PGBIN=$bin); install postgresql" >&2; exit 2
  fi
  PGBIN="$bin"
  BPG_DIR="$(mktemp -d "${TMPDIR:-/tmp}/orderly-bench-pg.XXXXXX")"
  if [ "$(id -u)" = 0 ]; then chown postgres: "$BPG_DIR"; fi
  chmod 700 "$BPG_DIR"
  as_postgres "$PGBIN/initdb" -D "$BPG_DIR/data" -U postgres --auth=trust -E UTF8 --locale=C >"$WORK/initdb.log" 2>&1 ||
    { cat "$WORK/initdb.log" >&2; exit 1; }
  for _ in $(seq 1 100); do # a free loopback port
    port=$(( 20000 + RANDOM % 20000 ))
    (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null || break
  done
  libs="pg_stat_statements"
  [ "$EXPLAIN" = 1 ] && libs="$libs,auto_explain"
  {
    echo "# orderly bench/run.sh"
    echo "port = $port"
    echo "listen_addresses = '127.0.0.1'"
    echo "unix_socket_directories = '$BPG_DIR'"
    echo "max_connections = 300"
    echo "shared_preload_libraries = '$libs'"
    echo "pg_stat_statements.max = 10000"
    echo "pg_stat_statements.track_planning = on"
    echo "track_io_timing = on"
    if [ "$EXPLAIN" = 1 ]; then
      echo "auto_explain.log_min_duration = 0"
      echo "auto_explain.sample_rate = $EXPLAIN_SAMPLE"
      echo "auto_explain.log_analyze = on"
      echo "auto_explain.log_buffers = on"
      echo "auto_explain.log_timing = off"
    fi
  } | as_postgres tee -a "$BPG_DIR/data/postgresql.conf" >/dev/null
  as_postgres "$PGBIN/pg_ctl" -D "$BPG_DIR/data" -l "$BPG_DIR/server.log" -w -t 120 start >"$WORK/pg_ctl.log" 2>&1 ||
    { cat "$WORK/pg_ctl.log" "$BPG_DIR/server.log" >&2; exit 1; }
  BPG_PORT=$port
  BPG_PID="$(head -n1 "$BPG_DIR/data/postmaster.pid")"
  psql -X -q -h 127.0.0.1 -p "$BPG_PORT" -U postgres -d template1 -c 'CREATE EXTENSION IF NOT EXISTS pg_stat_statements' >/dev/null
}
stop_bench_pg() {
  [ -n "$BPG_DIR" ] || return 0
  if [ -n "$BPG_PID" ]; then
    as_postgres "$PGBIN/pg_ctl" -D "$BPG_DIR/data" -m fast -w -t 60 stop >/dev/null 2>&1 || kill -KILL "$BPG_PID" 2>/dev/null
  fi
  rm -rf "$BPG_DIR"
  BPG_DIR="" BPG_PID=""
}

# ticks PID [FIELD...]: the sum of the given fields of /proc/PID/stat
# (default 14 and 15: utime and stime), in clock ticks; 0 if PID is gone.
ticks() {
  local pid=$1 stat sum=0 f
  shift
  local -a want=("$@") fs
  [ ${#want[@]} -gt 0 ] || want=(14 15)
  stat="$(cat "/proc/$pid/stat" 2>/dev/null)" || { echo 0; return; }
  read -r -a fs <<<"${stat##*) }" # fields 3, 4, … (the name may hold spaces)
  for f in "${want[@]}"; do sum=$(( sum + fs[f - 3] )); done
  echo "$sum"
}

# pg_snap: "PID TICKS" of the PostgreSQL processes that serve the benchmark,
# from /proc alone (no query, so no backend of its own): the client backends
# of its database (DB_NAME; their title is "postgres: USER DB HOST …") and
# the server's background processes (checkpointer, background writer, WAL
# writer, autovacuum, …), every child of the postmaster but other
# databases' backends; then "pm TICKS": the postmaster's own time and its
# reaped children's (fields 14–17), through which the CPU of backends that
# exit during a phase is counted to their end.
pg_snap() {
  [ -n "$PG_CPU_DB" ] || return 0
  local pid title
  for pid in $(pgrep -P "$BPG_PID"); do
    title="$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null)" || continue
    if [[ "$title" =~ ^postgres:\ [^\ ]+\ ([^\ ]+)\ [0-9.:a-f\[\]]+\( ]] && [ "${BASH_REMATCH[1]}" != "$PG_CPU_DB" ]; then
      continue # another database's backend
    fi
    echo "$pid $(ticks "$pid")"
  done
  echo "pm $(ticks "$BPG_PID" 14 15 16 17)"
}

# pct TICKS NANOSECONDS: CPU use in % of one core.
pct() { awk -v t="$1" -v ns="$2" -v hz="$HZ" 'BEGIN { if (ns > 0) printf "%.0f", t / hz / (ns / 1e9) * 100; else print "-" }'; }

# per_req TICKS N: CPU per request in µs ("-" without ticks or requests).
per_req() { awk -v t="$1" -v n="$2" -v hz="$HZ" 'BEGIN { if (t != "-" && n > 0) printf "%.0f", t / hz * 1e6 / n; else print "-" }'; }

# measured CMD...: runs CMD (a load generator) and sets CPU_ORDERD, CPU_PG
# and CPU_LOAD, the CPU orderd, PostgreSQL and CMD used meanwhile in % of a
# core, and TICKS_ORDERD and TICKS_PG in clock ticks. PostgreSQL's is the
# sum of per-process deltas between a snapshot before and one after (a
# process born meanwhile counts from 0); a process of the first snapshot
# that is gone from the second exited, and its time to the end is in the
# postmaster's reaped-children time, whose delta is added less what those
# processes had used before.
CPU_ORDERD="-" CPU_PG="-" CPU_LOAD="-" TICKS_ORDERD="-" TICKS_PG="-" LOAD_PID="" PG_CPU_DB=""
measured() {
  local t0 o0 t1 o1 rc=0 p v sum=0
  local -A first=() last=()
  while read -r p v; do [ -n "$p" ] && first[$p]=$v; done <<<"$(pg_snap)"
  t0=$(date +%s%N); o0=$(ticks "${ORDERD_PID:-0}")
  if [ -n "$TIME_BIN" ]; then
    "$TIME_BIN" -f '%U %S' -o "$WORK/time.txt" "$@" &
  else
    "$@" &
  fi
  LOAD_PID=$!
  wait "$LOAD_PID" || rc=$?
  LOAD_PID=""
  t1=$(date +%s%N); o1=$(ticks "${ORDERD_PID:-0}")
  while read -r p v; do [ -n "$p" ] && last[$p]=$v; done <<<"$(pg_snap)"
  TICKS_ORDERD="-" CPU_ORDERD="-"
  if [ -n "$ORDERD_PID" ]; then TICKS_ORDERD=$(( o1 - o0 )); CPU_ORDERD=$(pct "$TICKS_ORDERD" $(( t1 - t0 ))); fi
  TICKS_PG="-" CPU_PG="-"
  if [ -n "$PG_CPU_DB" ]; then
    for p in "${!last[@]}"; do sum=$(( sum + last[$p] - ${first[$p]:-0} )); done
    for p in "${!first[@]}"; do [ -n "${last[$p]:-}" ] || sum=$(( sum - first[$p] )); done
    TICKS_PG=$sum
    CPU_PG=$(pct "$sum" $(( t1 - t0 )))
  fi
  CPU_LOAD="-"
  if [ -n "$TIME_BIN" ]; then
    CPU_LOAD=$(tail -n1 "$WORK/time.txt" | awk -v ns=$(( t1 - t0 )) '{ printf "%.0f", ($1 + $2) / (ns / 1e9) * 100 }')
  fi
  return "$rc"
}

# statements_reset and statements LABEL N: pg_stat_statements of the run's
# database between the two calls (orderd's background workers' statements
# included: they run on its pool), top STATEMENTS_TOP by execution +
# planning time, with calls per request (N requests or transactions), to
# $OUT/statements/LABEL.txt; printed with STATEMENTS=1.
statements_reset() {
  [ -n "$PG_CPU_DB" ] || return 0
  psql -X -q -At -h 127.0.0.1 -p "$BPG_PORT" -U postgres -d "$DB_NAME" -c 'SELECT pg_stat_statements_reset()' >/dev/null
}
statements() {
  [ -n "$PG_CPU_DB" ] || return 0
  local label=$1 n=$2 f
  f="$OUT/statements/$label.txt"
  mkdir -p "$OUT/statements"
  {
    echo "-- $label: top statements by execution + planning time ($n requests or transactions)"
    psql -X -P pager=off -h 127.0.0.1 -p "$BPG_PORT" -U postgres -d "$DB_NAME" -v n="$n" -v top="$STATEMENTS_TOP" <<'SQL'
SELECT calls, round(calls::numeric / GREATEST(:n, 1), 3) AS "calls/req",
       round((total_exec_time * 1000 / calls)::numeric, 1) AS "exec µs/call",
       round((total_plan_time * 1000 / GREATEST(calls, 1))::numeric, 1) AS "plan µs/call",
       round(((total_exec_time + total_plan_time) * 1000 / GREATEST(:n, 1))::numeric, 1) AS "µs/req",
       plans, round(rows::numeric / calls, 2) AS "rows/call",
       round((shared_blks_hit + shared_blks_read)::numeric / calls, 1) AS "blks/call",
       round(wal_bytes / calls) AS "wal B/call",
       left(regexp_replace(query, '\s+', ' ', 'g'), 150) AS query
FROM pg_stat_statements
WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database()) AND calls > 0
  AND query NOT LIKE '%pg_stat_statements%'
ORDER BY total_exec_time + total_plan_time DESC
LIMIT :top;
SQL
  } >"$f" 2>&1
  [ "$STATEMENTS" = 1 ] && cat "$f"
  return 0
}

# start_orderd NAME VAR=VALUE...: starts one orderd on a free loopback port
# with the given settings and the built-in simulators, its per-tenant rate
# limit off (the benchmark is one tenant on purpose: what is measured is the
# service) and no admin listener; sets ORDERD_PID,
# ORDERD_URL and PPROF (its profiling address, with PROFILE=1).
ORDERD_URL="" PPROF=""
start_orderd() {
  local name=$1 log="$WORK/orderd-$1.log" addr="" pprof_env=()
  shift
  stop_orderd
  [ "$PROFILE" = 1 ] && pprof_env=(ORDERD_PPROF_ADDR=127.0.0.1:0)
  env -u ORDERD_DATABASE_URL -u ORDERD_DATA_DIR -u ORDERD_API_KEYS -u ORDERD_API_KEYS_FILE \
    -u ORDERD_PAYMENT_URL -u ORDERD_WAREHOUSE_URL -u ORDERD_LOG_LEVEL -u ORDERD_GROUP_COMMIT -u ORDERD_PPROF_ADDR \
    ORDERD_ADDR=127.0.0.1:0 ORDERD_ADMIN_ADDR= ORDERD_TENANT_RATE_LIMIT=0 "${pprof_env[@]}" "$@" "$BIN/orderd" >"$log" 2>&1 &
  ORDERD_PID=$!
  for _ in $(seq 1 150); do
    addr="$(grep -o '"msg":"listening","addr":"[^"]*"' "$log" | head -n1 | sed 's/.*"addr":"//; s/"$//' || true)"
    [ -n "$addr" ] && break
    kill -0 "$ORDERD_PID" 2>/dev/null || break
    sleep 0.2
  done
  if [ -z "$addr" ]; then
    echo "orderd ($name) did not start; its log:" >&2; tail -n 20 "$log" >&2; exit 1
  fi
  ORDERD_URL="http://$addr"
  PPROF="$(grep -o 'pprof on http://[^/]*' "$log" | head -n1 | sed 's/.*http:\/\///' || true)"
}

ROWS="$WORK/rows.tsv"
: >"$ROWS"
declare -A PGB_TPS=() PGB_US=()

# row OP CLIENTS TOOL RPS P50 P99 N [NOTE]: one line of the table, with the
# CPU figures of the last measured command for its N requests
# (tab-separated, the note last).
row() {
  local i
  for i in 4 5 6 7; do [ -n "${!i}" ] || set -- "${@:1:i-1}" - "${@:i+1}"; done # no empty field: read would merge it
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" "$5" "$6" \
    "$(per_req "$TICKS_ORDERD" "$7")" "$(per_req "$TICKS_PG" "$7")" "$CPU_ORDERD" "$CPU_PG" "$CPU_LOAD" "${8:-}" >>"$ROWS"
}

# wrk_field NAME FILE: a field of the WRK line of common.lua's done().
wrk_field() { grep -m1 '^WRK ' "$2" | tr ' ' '\n' | sed -n "s/^$1=//p"; }

# wrk_phase OP C SCRIPT ARGS...: wrk with C connections for the phase's
# duration against the running orderd, one row.
wrk_phase() {
  local op=$1 c=$2 script=$3 out note="" prof=""
  shift 3
  out="$LOGS/wrk-$op-c$c.txt"
  echo "   $op c=$c: wrk ${SECS}s"
  if [ "$PROFILE" = 1 ] && [ "$op" = "$PROFILE_PHASE" ] && [ "$c" = "$PROFILE_CLIENTS" ] && [ -n "$PPROF" ]; then
    prof="$OUT/orderd-cpu.pprof"
    curl -sS --max-time $(( SECS + 30 )) -o "$prof" "http://$PPROF/debug/pprof/profile?seconds=$SECS" &
    PROFILE_PID=$!
  fi
  statements_reset
  if ! measured timeout $(( SECS + 60 )) wrk -t "$(( c < 2 ? c : 2 ))" -c "$c" -d "${SECS}s" --timeout 10s --latency \
      -s "bench/wrk/$script" "$ORDERD_URL" -- "$@" >"$out" 2>&1 || ! grep -q '^WRK ' "$out"; then
    cat "$out" >&2; echo "wrk failed ($op c=$c)" >&2; exit 1
  fi
  if [ -n "$prof" ]; then
    wait "$PROFILE_PID" || echo "WARNING: the CPU profile of $op c=$c failed" >&2
    PROFILE_PID=""
    PROFILED="$op c=$c"
  fi
  local non2xx sock exhausted n
  non2xx=$(wrk_field non2xx "$out"); sock=$(( $(wrk_field socket_errors "$out") + $(wrk_field timeouts "$out") ))
  exhausted=$(wrk_field exhausted "$out"); n=$(wrk_field requests "$out")
  [ "$non2xx" != 0 ] && note="$non2xx non-2xx"
  [ "$sock" != 0 ] && note="$note $sock socket errors/timeouts"
  [ "$exhausted" != 0 ] && note="$note ran out of setup orders (too low)"
  statements "$op-c$c-wrk" "$n"
  row "$op" "$c" wrk "$(wrk_field rps "$out")" "$(wrk_field p50_ms "$out")" "$(wrk_field p99_ms "$out")" "$n" "${note# }"
}

# go_phase OP C OPS: the Go client (orderstorm -mode bench) with C clients
# against the running orderd; OPS=create measures creates only, OPS=all
# creates (as its own setup, not shown), then replays and pays them.
go_phase() {
  local op=$1 c=$2 ops=$3 out="$LOGS/go-$1-c$2" secs
  echo "   $op c=$c: go-client ${SECS}s$([ "$ops" = all ] && echo ' × 3 (create as setup, replay, pay)')"
  secs=$SECS
  [ "$ops" = all ] && secs=$(( 3 * SECS ))
  statements_reset
  if ! measured timeout $(( secs + 120 )) env ORDERSTORM_BENCH_OPS="$ops" "$BIN/orderstorm" -mode bench \
      -targets "$ORDERD_URL" -bench-clients "$c" -bench-duration "${SECS}s" -json "$out.json" >"$out.txt" 2>&1; then
    cat "$out.txt" >&2; echo "orderstorm failed ($op c=$c)" >&2; exit 1
  fi
  # one figure for three phases: not per request
  if [ "$ops" = all ]; then CPU_ORDERD="-" CPU_PG="-" CPU_LOAD="-" TICKS_ORDERD="-" TICKS_PG="-"; fi
  local rop rps p50 p99 errs n
  while IFS=$'\t' read -r rop rps p50 p99 errs n; do
    [ "$ops" = all ] && [ "$rop" = create ] && continue
    [ "$ops" = create ] && { rop=$op; statements "$op-c$c-go" "$n"; }
    row "$rop" "$c" go-client "$rps" "$p50" "$p99" "$n" "$([ "$errs" != 0 ] && echo "$errs errors")"
  done < <(jq -r '.bench[] | [.op, .service_req_per_s, .service_p50_ms, .service_p99_ms, .service_errors, .service_ops + .service_errors] | @tsv' "$out.json")
}

# pgbench_phase SCRIPT C [SETUP]: pgbench runs bench/SCRIPT (after
# bench/SETUP) with C clients on the database; records its tps and
# PostgreSQL's CPU per transaction.
pgbench_phase() {
  local script=$1 c=$2 setup=${3:-} out="$LOGS/pgbench-${1%.sql}-c$2.txt" tps n
  echo "   ${script%.sql} c=$c: pgbench ${SECS}s"
  [ -n "$setup" ] && PGOPTIONS="-c client_min_messages=warning" psql -q -X -v ON_ERROR_STOP=1 -f "bench/$setup" "$URL" >/dev/null
  statements_reset
  # pay.sql's clients take setup orders in turn: -D i=0 -D clients=C.
  if ! ORDERD_PID="" measured timeout $(( SECS + 60 )) "$PGBENCH" -n -M prepared -c "$c" -j "$(( c < 2 ? c : 2 ))" -T "$SECS" \
      -D i=0 -D clients="$c" -f "bench/$script" "$URL" >"$out" 2>&1; then
    cat "$out" >&2; echo "pgbench failed ($script c=$c)" >&2; exit 1
  fi
  tps="$(sed -n 's/^tps = \([0-9.]*\) (without initial connection time)/\1/p' "$out")"
  n="$(sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p' "$out")"
  PGB_TPS["${script%.sql},$c"]="$tps"
  PGB_US["${script%.sql},$c"]="$(per_req "$TICKS_PG" "$n")"
  statements "pgbench-${script%.sql}-c$c" "$n"
  row "pgbench:${script%.sql}" "$c" pgbench "$tps" \
    "$(sed -n 's/^latency average = \([0-9.]*\) ms/\1/p' "$out")" - "$n" "p50 column: pgbench's average latency"
}

# explain_pay: EXPLAIN (ANALYZE, BUFFERS) of every statement of
# bench/pay.sql, in one transaction that is rolled back, on an unpaid order
# of bench/pay_setup.sql (the last: pgbench's clients take them from the
# first).
explain_pay() {
  local f="$OUT/explain-pay.txt"
  {
    echo "BEGIN;"
    grep -v '^\\\|^--' bench/pay.sql | sed 's/:n\b/200000/g' |
      awk 'BEGIN { start = 1 } { if (start && $0 != "") { printf "EXPLAIN (ANALYZE, BUFFERS, VERBOSE OFF) " } print; start = ($0 ~ /;[[:space:]]*$/) }'
    echo "ROLLBACK;"
  } >"$WORK/explain-pay.sql"
  psql -X -P pager=off -e -v ON_ERROR_STOP=1 -f "$WORK/explain-pay.sql" "$URL" >"$f" 2>&1 || { cat "$f" >&2; echo "EXPLAIN of pay.sql failed" >&2; }
  echo "== EXPLAIN (ANALYZE, BUFFERS) of bench/pay.sql ($f)"
  cat "$f"
}

# auto_explain_digest: the plans auto_explain logged (EXPLAIN=1), to
# $OUT/auto-explain.txt, and for each statement how often it was sampled
# and which scan nodes its plans used.
auto_explain_digest() {
  local f="$OUT/auto-explain.txt"
  awk '/LOG:  duration: .* plan:/ { on = 1; print "----"; next } on && /^\t/ { print; next } { on = 0 }' "$BPG_DIR/server.log" >"$f"
  echo "== auto_explain: plans sampled during the run ($f); per statement: samples, scan nodes"
  awk '
    /^----/ { q = ""; next }
    /^\tQuery Text:/ { q = substr($0, 14, 110); gsub(/[ \t]+/, " ", q); n[q]++; next }
    q != "" && /(Seq Scan|Index Scan|Index Only Scan|Bitmap Heap Scan|Bitmap Index Scan) / {
      s = $0; sub(/^[ \t>-]*/, "", s); sub(/  \(.*/, "", s); sub(/ \(actual.*/, "", s); scans[q] = scans[q] ? scans[q] : ""; if (index(scans[q], s) == 0) scans[q] = scans[q] s "; " }
    END { for (q in n) printf "%6d  %s\n        %s\n", n[q], q, scans[q] }' "$f" | sort -rn | head -n 80
}

print_table() {
  printf '%-16s %7s %-9s %8s %8s %8s %11s %6s %8s %8s %9s %7s %7s %7s  %s\n' \
    op clients tool "req/s" "p50 ms" "p99 ms" "pgbench tps" ratio "orderd" "pg" "pgbench" "orderd%" "pg%" "load%" note
  printf '%-16s %7s %-9s %8s %8s %8s %11s %6s %8s %8s %9s %7s %7s %7s\n' \
    "" "" "" "" "" "" "" "" "µs/req" "µs/req" "pg µs/tx" "" "" ""
  local op c tool rps p50 p99 note uo up co cp cl tps ratio key pgus
  while IFS=$'\t' read -r op c tool rps p50 p99 uo up co cp cl note; do
    tps="" pgus="-"
    key="${op%%(*}"
    if [[ "$op" == pgbench:* ]]; then
      printf '%-16s %7s %-9s %8s %8s %8s %11s %6s %8s %8s %9s %7s %7s %7s  %s\n' \
        "$op" "$c" "$tool" "${rps%.*}" "$p50" "-" "-" "-" "-" "-" "$up" "-" "$cp" "$cl" "$note"
      continue
    fi
    [ "$op" = "create(sqlite)" ] || { tps="${PGB_TPS["$key,$c"]:-}"; pgus="${PGB_US["$key,$c"]:--}"; }
    ratio="-"
    if [ -n "$tps" ]; then ratio=$(awk -v a="$rps" -v b="$tps" 'BEGIN { printf "%.2f", a / b }'); else tps="-"; fi
    printf '%-16s %7s %-9s %8.0f %8.2f %8.2f %11s %6s %8s %8s %9s %7s %7s %7s  %s\n' \
      "$op" "$c" "$tool" "$rps" "$p50" "$p99" "${tps%.*}" "$ratio" "$uo" "$up" "$pgus" "$co" "$cp" "$cl" "$note"
  done <"$ROWS"
}

# phase NAME: whether PHASES names it.
phase() { [[ "$PHASES" == *",$1,"* ]]; }

run_load() {
  LOGS="$OUT/load-logs"
  rm -rf "$LOGS" "$OUT/statements"; mkdir -p "$LOGS"
  PROFILED=""
  export LUA_PATH="$PWD/bench/wrk/?.lua;;"
  local run c
  run="$(date +%s)-$$"
  echo "== load benchmark: clients $CLIENTS, ${SECS}s per phase, phases ${PHASES//,/ }"
  start_bench_pg
  echo "   PostgreSQL $("$PGBIN/postgres" --version | awk '{print $3}') of the benchmark's own on 127.0.0.1:$BPG_PORT (pg_stat_statements$([ "$EXPLAIN" = 1 ] && echo ", auto_explain")):" \
    "$(psql -X -At -h 127.0.0.1 -p "$BPG_PORT" -U postgres -d postgres -c "select string_agg(name || '=' || current_setting(name), ', ' order by name) from pg_settings where name in ('synchronous_commit', 'shared_buffers', 'fsync', 'max_connections', 'wal_level')")" |
    tee -a "$OUT/machine-$WHAT.txt"
  DB_PORT=$BPG_PORT
  fresh_db load
  PG_CPU_DB="$DB_NAME"
  for c in "${CLIENT_LIST[@]}"; do
    if phase create; then
      start_orderd gc-on ORDERD_DATABASE_URL="$URL" ORDERD_GROUP_COMMIT=true
      wrk_phase "create(gc=on)" "$c" create.lua "wrk-$run-gcon-c$c"
      go_phase "create(gc=on)" "$c" create
      start_orderd gc-off ORDERD_DATABASE_URL="$URL" ORDERD_GROUP_COMMIT=false
      wrk_phase "create(gc=off)" "$c" create.lua "wrk-$run-gcoff-c$c"
      go_phase "create(gc=off)" "$c" create
    fi
    if phase replay || phase pay; then
      start_orderd default ORDERD_DATABASE_URL="$URL"
      echo "   setup c=$c: wrk ${SETUP_SECS}s (orders with keys for replay and pay, not measured)"
      timeout $(( SETUP_SECS + 60 )) wrk -t "$(( c < 2 ? c : 2 ))" -c "$c" -d "${SETUP_SECS}s" --timeout 10s \
        -s bench/wrk/setup.lua "$ORDERD_URL" -- "setup-$run-c$c" "$WORK/setup-c$c" >"$LOGS/wrk-setup-c$c.txt" 2>&1
      local files n
      files="$(printf '%s,' "$WORK/setup-c$c"-t*.txt)"
      files="${files%,}"
      n="$(cat "$WORK/setup-c$c"-t*.txt | wc -l)"
      echo "   setup c=$c: $n orders"
      # replay cycles through 1 000 keys, as bench/replay.sql does
      cat "$WORK/setup-c$c"-t*.txt | awk 'NR <= 1000' >"$WORK/replay-keys-c$c.txt"
      phase replay && wrk_phase replay "$c" replay.lua "$WORK/replay-keys-c$c.txt" "$(( c < 2 ? c : 2 ))"
      phase pay && wrk_phase pay "$c" pay.lua "$files" "$(( c < 2 ? c : 2 ))" "pay-$run-c$c"
      go_phase "replay+pay" "$c" all
      stop_orderd
    fi
    if phase pgbench; then
      phase create && pgbench_phase create.sql "$c"
      phase replay && pgbench_phase replay.sql "$c" replay_setup.sql
      phase pay && pgbench_phase pay.sql "$c" pay_setup.sql
    fi
  done
  if [ "$EXPLAIN" = 1 ]; then
    PGOPTIONS="-c client_min_messages=warning" psql -q -X -v ON_ERROR_STOP=1 -f bench/pay_setup.sql "$URL" >/dev/null
    explain_pay
    auto_explain_digest
  fi
  PG_CPU_DB=""
  DB_PORT=5432
  if phase sqlite; then
    start_orderd sqlite ORDERD_DATA_DIR="$WORK/sqlite-data"
    wrk_phase "create(sqlite)" "$SQLITE_CLIENTS" create.lua "wrk-$run-sqlite"
    stop_orderd
  fi
  stop_bench_pg

  {
    echo
    echo "Orderly load benchmark: ${SECS}s per phase; req/s counts 2xx answers; ratio = req/s ÷ pgbench tps of the"
    echo "same SQL (bench/*.sql) at the same clients; µs/req: CPU per request (every answer) of orderd (built-in"
    echo "payment simulator included) and of PostgreSQL (the run's database's backends and the server's background"
    echo "processes); pgbench pg µs/tx: PostgreSQL's CPU per transaction of that SQL under pgbench; orderd%, pg%,"
    echo "load% (wrk, the Go client or pgbench): CPU during the phase, % of one core ($(nproc) cores). Replay and pay"
    echo "run on orderd's defaults. CPU from /proc in ticks of 1/$HZ s."
    echo
    print_table
  } | tee "$OUT/load.txt"
  { printf 'op\tclients\ttool\treq_per_s\tp50_ms\tp99_ms\torderd_us_per_req\tpg_us_per_req\torderd_cpu_pct\tpg_cpu_pct\tload_cpu_pct\tnote\n'; cat "$ROWS"; } >"$OUT/load.tsv"
  for k in "${!PGB_TPS[@]}"; do printf 'pgbench\t%s\t%s\t%s\n' "$k" "${PGB_TPS[$k]}" "${PGB_US[$k]}"; done | sort >"$OUT/load-pgbench.tsv"
  if [ "$PROFILE" = 1 ]; then
    if [ -n "$PROFILED" ] && [ -s "$OUT/orderd-cpu.pprof" ]; then
      echo
      echo "== orderd CPU profile during $PROFILED ($OUT/orderd-cpu.pprof): go tool pprof -top"
      go tool pprof -top -nodecount=30 "$BIN/orderd" "$OUT/orderd-cpu.pprof" 2>/dev/null | tee "$OUT/orderd-cpu-top.txt"
    else
      echo "WARNING: PROFILE=1 but no profile was taken: PROFILE_PHASE=$PROFILE_PHASE PROFILE_CLIENTS=$PROFILE_CLIENTS must name a wrk phase of this run" >&2
    fi
  fi
}

if [ "$WHAT" = load ] || [ "$WHAT" = all ]; then
  run_load
fi

if [ "$WHAT" = gobench ] || [ "$WHAT" = all ]; then
  echo "== go benchmarks: go test -run '^\$' -bench . -benchtime 2000x ./service/"
  ORDERLY_TEST_DATABASE_URL="$PG/test?sslmode=disable" go test -run '^$' -bench . -benchtime 2000x ./service/ | tee "$OUT/gobench.txt"
fi

if [ "$WHAT" = storm ] || [ "$WHAT" = all ]; then
  KILL=()
  STORE_ARGS=()
  ENTRY=(-webhooks -provider-webhooks -bus-commands "$STORM_BUS" -require-all-checks)
  if [ "$STORM_STORE" = sqlite ]; then
    # The embedded store serves one instance: one orderd on a data dir of
    # the run's (no database URL), no replica, no backend kills.
    [ "$KILL_EVERY" != 0 ] && KILL=(-kill-every "$KILL_EVERY" -kill-paysim)
    STORE_ARGS=(-spawn 1)
    echo "== storm: $STORM_OPS logical operations, 1 orderd on the embedded store + paysim, kill every $KILL_EVERY"
  else
    if [ "$STORM_REPLICA" = 1 ]; then
      # A primary and a streaming standby of the run's own (internal/pgpair,
      # as .ci/replicas), the standby applying every commit
      # STORM_REPLICA_DELAY late; both orderd read from it.
      go build -o "$BIN/pgpair" ./internal/pgpair/cmd/pgpair
      "$BIN/pgpair" -apply-delay "$STORM_REPLICA_DELAY" -db orderly_storm >"$WORK/pgpair.out" 2>"$WORK/pgpair.log" &
      PAIR_PID=$!
      for _ in $(seq 1 600); do
        grep -q '^STANDBY_URL=' "$WORK/pgpair.out" && break
        kill -0 "$PAIR_PID" 2>/dev/null || { cat "$WORK/pgpair.log" >&2; echo "pgpair exited" >&2; exit 1; }
        sleep 0.2
      done
      grep -q '^STANDBY_URL=' "$WORK/pgpair.out" || { echo "pgpair did not start within 120s" >&2; exit 1; }
      URL=$(sed -n 's/^PRIMARY_URL=//p' "$WORK/pgpair.out")
      STANDBY_URL=$(sed -n 's/^STANDBY_URL=//p' "$WORK/pgpair.out")
      ENTRY+=(-orderd-env "ORDERD_DATABASE_REPLICA_URLS=$STANDBY_URL")
      echo "postgres (storm): $(psql "$URL" -Atc 'show server_version') primary and standby of the run's own (pgpair; standby $STORM_REPLICA_DELAY behind)" | tee -a "$OUT/machine-$WHAT.txt"
    else
      fresh_db storm
    fi
    [ "$KILL_EVERY" != 0 ] && KILL=(-kill-every "$KILL_EVERY" -kill-paysim -kill-db-connections-every 30s)
    STORE_ARGS=(-spawn 2 -database-url "$URL")
    echo "== storm: $STORM_OPS logical operations, 2 orderd on PostgreSQL + paysim, kill every $KILL_EVERY, replica $STORM_REPLICA"
  fi
  if [ "$STORM_BUS" != 0 ] && ! (exec 3<>/dev/tcp/127.0.0.1/4222) 2>/dev/null; then
    echo "the storm's bus commands need NATS with JetStream on 127.0.0.1:4222 (or STORM_BUS=0, which fails the bus check as not run)" >&2; exit 2
  fi
  STORM_RC=0
  "$BIN/orderstorm" "${STORE_ARGS[@]}" -bin-dir "$BIN" \
    -ops "$STORM_OPS" -duration "$STORM_DURATION" -shoppers "$SHOPPERS" -settle 120s "${KILL[@]}" \
    -proxy-drop 0.03 -proxy-cut 0.01 -proxy-truncate 0.01 \
    -paysim-drop-rate 0.03 -paysim-timeout-rate 0.01 -paysim-error-rate 0.02 "${ENTRY[@]}" \
    -json "$OUT/storm.json" -svg "$OUT/storm.svg" | tee "$OUT/storm.txt" || STORM_RC=$?
  if [ -n "$PAIR_PID" ]; then
    kill -TERM "$PAIR_PID" 2>/dev/null || true
    wait "$PAIR_PID" 2>/dev/null || true
    PAIR_PID=""
  fi
  if [ "$STORM_RC" != 0 ]; then
    echo "storm: FAILED (orderstorm exit $STORM_RC; 1 = anomalies or a check that did not run, 2 = harness error)" >&2
    echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$OUT/machine-$WHAT.txt"
    exit "$STORM_RC"
  fi
fi
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$OUT/machine-$WHAT.txt"
