#!/usr/bin/env bash
# Orderly's benchmarks on this machine's PostgreSQL (127.0.0.1:5432, user
# postgres, trust auth). Method and figures: BENCHMARKS.md.
#
#   bash bench/run.sh            # = load: the load benchmark, one table (about 10 minutes)
#   bash bench/run.sh gobench    # Go benchmarks of ./service/ (round trips and commits per op)
#   bash bench/run.sh storm      # the long storm (12 000 logical operations)
#   bash bench/run.sh all        # load, gobench and storm
#
# load, for each client count C of CLIENTS, on one fresh database:
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
# answers only), p50/p99 latency, pgbench's tps for the same SQL, their ratio,
# and the CPU that orderd, PostgreSQL and the load generator used during the
# phase (% of one core).
#
# Settings (environment):
#   CLIENTS=4,16,64  BENCH_DURATION=10s  SQLITE_CLIENTS=16
#   OUT=bench/results (git-ignored; logs in $OUT/load-logs)
#   PROFILE=1        CPU profile of orderd during one wrk phase, with its
#                    `go tool pprof -top` lines: PROFILE_PHASE=create(gc=on)
#                    (or create(gc=off), replay, pay, create(sqlite)) at
#                    PROFILE_CLIENTS=16; orderd serves pprof on loopback
#                    (ORDERD_PPROF_ADDR, cmd/orderd/profile.go)
#   storm: STORM_OPS=12000 STORM_DURATION=15m KILL_EVERY=20s (0: none) SHOPPERS=16
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
STORM_OPS="${STORM_OPS:-12000}"
STORM_DURATION="${STORM_DURATION:-15m}"
KILL_EVERY="${KILL_EVERY:-20s}"
SHOPPERS="${SHOPPERS:-16}"
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
  for db in "${DBS[@]}"; do dropdb --if-exists --force -h 127.0.0.1 -U postgres "$db" 2>/dev/null || true; done
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
URL=""
fresh_db() {
  local db="orderly_bench_$1_$$"
  dropdb --if-exists --force -h 127.0.0.1 -U postgres "$db" 2>/dev/null
  createdb -h 127.0.0.1 -U postgres "$db"
  DBS+=("$db")
  URL="$PG/$db?sslmode=disable"
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
  echo "postgres: $(psql -h 127.0.0.1 -U postgres -Atc 'show server_version') (synchronous_commit=$(psql -h 127.0.0.1 -U postgres -Atc 'show synchronous_commit'), shared_buffers=$(psql -h 127.0.0.1 -U postgres -Atc 'show shared_buffers'))"
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
PG_CPU_URL=""

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

# pg_snap: "PID TICKS" of the PostgreSQL processes that serve the benchmark:
# the client backends of its database (PG_CPU_URL; not this query's own)
# and the server's background processes (WAL writer, checkpointer, …).
# Backends of other databases (other people's tests on a shared server) are
# left out.
pg_snap() {
  [ -n "$PG_CPU_URL" ] || return 0
  local pid
  for pid in $(psql -X -Atc "select pid from pg_stat_activity where pid <> pg_backend_pid()
      and (datname = current_database() or backend_type <> 'client backend')" "$PG_CPU_URL" 2>/dev/null); do
    echo "$pid $(ticks "$pid")"
  done
}

# pct TICKS NANOSECONDS: CPU use in % of one core.
pct() { awk -v t="$1" -v ns="$2" -v hz="$HZ" 'BEGIN { if (ns > 0) printf "%.0f", t / hz / (ns / 1e9) * 100; else print "-" }'; }

# measured CMD...: runs CMD (a load generator) and sets CPU_ORDERD, CPU_PG
# and CPU_LOAD, the CPU orderd, PostgreSQL and CMD used meanwhile. The
# PostgreSQL processes are sampled every half second and each keeps its last
# sample: orderd's backends exit when wrk closes its connections with
# requests in flight at the end of a phase (pgx closes a connection whose
# query's context is cancelled), so a reading after the end would miss them.
CPU_ORDERD="-" CPU_PG="-" CPU_LOAD="-" LOAD_PID=""
measured() {
  local t0 o0 t1 o1 rc=0 p v sum=0
  local -A first=() last=()
  while read -r p v; do [ -n "$p" ] && first[$p]=$v; done <<<"$(pg_snap)"
  t0=$(date +%s%N); o0=$(ticks "$ORDERD_PID")
  if [ -n "$TIME_BIN" ]; then
    "$TIME_BIN" -f '%U %S' -o "$WORK/time.txt" "$@" &
  else
    "$@" &
  fi
  LOAD_PID=$!
  while kill -0 "$LOAD_PID" 2>/dev/null; do
    sleep 0.5
    while read -r p v; do [ -n "$p" ] && last[$p]=$v; done <<<"$(pg_snap)"
  done
  wait "$LOAD_PID" || rc=$?
  LOAD_PID=""
  t1=$(date +%s%N); o1=$(ticks "$ORDERD_PID")
  CPU_ORDERD=$(pct $(( o1 - o0 )) $(( t1 - t0 )))
  CPU_PG="-"
  if [ -n "$PG_CPU_URL" ]; then
    for p in "${!last[@]}"; do sum=$(( sum + last[$p] - ${first[$p]:-0} )); done
    CPU_PG=$(pct "$sum" $(( t1 - t0 )))
  fi
  CPU_LOAD="-"
  if [ -n "$TIME_BIN" ]; then
    CPU_LOAD=$(tail -n1 "$WORK/time.txt" | awk -v ns=$(( t1 - t0 )) '{ printf "%.0f", ($1 + $2) / (ns / 1e9) * 100 }')
  fi
  return "$rc"
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
declare -A PGB_TPS=()

# row OP CLIENTS TOOL RPS P50 P99 [NOTE]: one line of the table, with the
# CPU figures of the last measured command (tab-separated, the note last).
row() {
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" "$5" "$6" \
    "$CPU_ORDERD" "$CPU_PG" "$CPU_LOAD" "${7:-}" >>"$ROWS"
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
  if ! measured timeout $(( SECS + 60 )) wrk -t "$(( c < 2 ? c : 2 ))" -c "$c" -d "${SECS}s" --timeout 10s --latency \
      -s "bench/wrk/$script" "$ORDERD_URL" -- "$@" >"$out" 2>&1 || ! grep -q '^WRK ' "$out"; then
    cat "$out" >&2; echo "wrk failed ($op c=$c)" >&2; exit 1
  fi
  if [ -n "$prof" ]; then
    wait "$PROFILE_PID" || echo "WARNING: the CPU profile of $op c=$c failed" >&2
    PROFILE_PID=""
    PROFILED="$op c=$c"
  fi
  local non2xx sock exhausted
  non2xx=$(wrk_field non2xx "$out"); sock=$(( $(wrk_field socket_errors "$out") + $(wrk_field timeouts "$out") ))
  exhausted=$(wrk_field exhausted "$out")
  [ "$non2xx" != 0 ] && note="$non2xx non-2xx"
  [ "$sock" != 0 ] && note="$note $sock socket errors/timeouts"
  [ "$exhausted" != 0 ] && note="$note ran out of setup orders (too low)"
  row "$op" "$c" wrk "$(wrk_field rps "$out")" "$(wrk_field p50_ms "$out")" "$(wrk_field p99_ms "$out")" "${note# }"
}

# go_phase OP C OPS: the Go client (orderstorm -mode bench) with C clients
# against the running orderd; OPS=create measures creates only, OPS=all
# creates (as its own setup, not shown), then replays and pays them.
go_phase() {
  local op=$1 c=$2 ops=$3 out="$LOGS/go-$1-c$2" secs
  echo "   $op c=$c: go-client ${SECS}s$([ "$ops" = all ] && echo ' × 3 (create as setup, replay, pay)')"
  secs=$SECS
  [ "$ops" = all ] && secs=$(( 3 * SECS ))
  if ! measured timeout $(( secs + 120 )) env ORDERSTORM_BENCH_OPS="$ops" "$BIN/orderstorm" -mode bench \
      -targets "$ORDERD_URL" -bench-clients "$c" -bench-duration "${SECS}s" -json "$out.json" >"$out.txt" 2>&1; then
    cat "$out.txt" >&2; echo "orderstorm failed ($op c=$c)" >&2; exit 1
  fi
  if [ "$ops" = all ]; then CPU_ORDERD="-" CPU_PG="-" CPU_LOAD="-"; fi # one figure for three phases
  local rop rps p50 p99 errs
  while IFS=$'\t' read -r rop rps p50 p99 errs; do
    [ "$ops" = all ] && [ "$rop" = create ] && continue
    [ "$ops" = create ] && rop=$op
    row "$rop" "$c" go-client "$rps" "$p50" "$p99" "$([ "$errs" != 0 ] && echo "$errs errors")"
  done < <(jq -r '.bench[] | [.op, .service_req_per_s, .service_p50_ms, .service_p99_ms, .service_errors] | @tsv' "$out.json")
}

# pgbench_phase SCRIPT C [SETUP]: pgbench runs bench/SCRIPT (after
# bench/SETUP) with C clients on the database; records its tps.
pgbench_phase() {
  local script=$1 c=$2 setup=${3:-} out="$LOGS/pgbench-${1%.sql}-c$2.txt" tps
  echo "   ${script%.sql} c=$c: pgbench ${SECS}s"
  [ -n "$setup" ] && PGOPTIONS="-c client_min_messages=warning" psql -q -X -v ON_ERROR_STOP=1 -f "bench/$setup" "$URL" >/dev/null
  # pay.sql's clients take setup orders in turn: -D i=0 -D clients=C.
  if ! timeout $(( SECS + 60 )) "$PGBENCH" -n -M prepared -c "$c" -j "$(( c < 2 ? c : 2 ))" -T "$SECS" \
      -D i=0 -D clients="$c" -f "bench/$script" "$URL" >"$out" 2>&1; then
    cat "$out" >&2; echo "pgbench failed ($script c=$c)" >&2; exit 1
  fi
  tps="$(sed -n 's/^tps = \([0-9.]*\) (without initial connection time)/\1/p' "$out")"
  PGB_TPS["${script%.sql},$c"]="$tps"
}

print_table() {
  printf '%-15s %7s %-9s %8s %8s %8s %11s %6s %7s %7s %7s  %s\n' \
    op clients tool "req/s" "p50 ms" "p99 ms" "pgbench tps" ratio "orderd%" "pg%" "load%" note
  local op c tool rps p50 p99 note co cp cl tps ratio
  while IFS=$'\t' read -r op c tool rps p50 p99 co cp cl note; do
    tps=""
    [ "$op" = "create(sqlite)" ] || tps="${PGB_TPS["${op%%(*},$c"]:-}"
    ratio="-"
    if [ -n "$tps" ]; then ratio=$(awk -v a="$rps" -v b="$tps" 'BEGIN { printf "%.2f", a / b }'); else tps="-"; fi
    printf '%-15s %7s %-9s %8.0f %8.2f %8.2f %11s %6s %7s %7s %7s  %s\n' \
      "$op" "$c" "$tool" "$rps" "$p50" "$p99" "${tps%.*}" "$ratio" "$co" "$cp" "$cl" "$note"
  done <"$ROWS"
}

run_load() {
  LOGS="$OUT/load-logs"
  rm -rf "$LOGS"; mkdir -p "$LOGS"
  PROFILED=""
  export LUA_PATH="$PWD/bench/wrk/?.lua;;"
  local run c
  run="$(date +%s)-$$"
  echo "== load benchmark: clients $CLIENTS, ${SECS}s per phase, then create(sqlite) at $SQLITE_CLIENTS"
  fresh_db load
  PG_CPU_URL="$URL"
  for c in "${CLIENT_LIST[@]}"; do
    start_orderd gc-on ORDERD_DATABASE_URL="$URL" ORDERD_GROUP_COMMIT=true
    wrk_phase "create(gc=on)" "$c" create.lua "wrk-$run-gcon-c$c"
    go_phase "create(gc=on)" "$c" create
    start_orderd gc-off ORDERD_DATABASE_URL="$URL" ORDERD_GROUP_COMMIT=false
    wrk_phase "create(gc=off)" "$c" create.lua "wrk-$run-gcoff-c$c"
    go_phase "create(gc=off)" "$c" create
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
    wrk_phase replay "$c" replay.lua "$WORK/replay-keys-c$c.txt" "$(( c < 2 ? c : 2 ))"
    wrk_phase pay "$c" pay.lua "$files" "$(( c < 2 ? c : 2 ))" "pay-$run-c$c"
    go_phase "replay+pay" "$c" all
    stop_orderd
    pgbench_phase create.sql "$c"
    pgbench_phase replay.sql "$c" replay_setup.sql
    pgbench_phase pay.sql "$c" pay_setup.sql
  done
  PG_CPU_URL=""
  start_orderd sqlite ORDERD_DATA_DIR="$WORK/sqlite-data"
  wrk_phase "create(sqlite)" "$SQLITE_CLIENTS" create.lua "wrk-$run-sqlite"
  stop_orderd

  {
    echo
    echo "Orderly load benchmark: ${SECS}s per phase; req/s counts 2xx answers; ratio = req/s ÷ pgbench tps of the"
    echo "same SQL (bench/*.sql) at the same clients; orderd%, pg% (PostgreSQL), load% (wrk or the Go client):"
    echo "CPU during the phase, % of one core ($(nproc) cores). Replay and pay run on orderd's defaults."
    echo
    print_table
  } | tee "$OUT/load.txt"
  { printf 'op\tclients\ttool\treq_per_s\tp50_ms\tp99_ms\torderd_cpu_pct\tpg_cpu_pct\tload_cpu_pct\tnote\n'; cat "$ROWS"; } >"$OUT/load.tsv"
  for k in "${!PGB_TPS[@]}"; do printf 'pgbench\t%s\t%s\n' "$k" "${PGB_TPS[$k]}"; done | sort >"$OUT/load-pgbench.tsv"
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
  echo "== storm: $STORM_OPS logical operations, 2 orderd + paysim, kill every $KILL_EVERY"
  fresh_db storm
  KILL=()
  [ "$KILL_EVERY" != 0 ] && KILL=(-kill-every "$KILL_EVERY" -kill-paysim -kill-db-connections-every 30s)
  "$BIN/orderstorm" -spawn 2 -bin-dir "$BIN" -database-url "$URL" \
    -ops "$STORM_OPS" -duration "$STORM_DURATION" -shoppers "$SHOPPERS" -settle 120s "${KILL[@]}" \
    -proxy-drop 0.03 -proxy-cut 0.01 -proxy-truncate 0.01 \
    -paysim-drop-rate 0.03 -paysim-timeout-rate 0.01 -paysim-error-rate 0.02 \
    -json "$OUT/storm.json" -svg "$OUT/storm.svg" | tee "$OUT/storm.txt"
fi
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$OUT/machine-$WHAT.txt"
