#!/usr/bin/env bash
# Reproduces the figures of BENCHMARKS.md on this machine's PostgreSQL
# (127.0.0.1:5432, trust auth, user postgres).
#
#   bash bench/run.sh            # gobench + load bench (+ pgbench), about 4 minutes
#   bash bench/run.sh storm      # the long storm only (12 000 logical operations)
#   bash bench/run.sh all        # everything
#
# Steps (each on a fresh database it creates and drops):
#   gobench  go test -run '^$' -bench . -benchtime 2000x ./service/
#            (round trips and commits per operation, counted by a pgx tracer)
#   load     orderstorm -mode bench: one orderd (built-in payment simulator,
#            default pool), C concurrent clients for BENCH_DURATION per phase:
#            new orders, replays of them (same key), pays of them; then
#            pgbench runs bench/create.sql, replay.sql and pay.sql — the same
#            statements — with the same C clients for the same time.
#   storm    orderstorm -spawn 2 with paysim: STORM_OPS logical operations
#            with every duplicate pattern, proxy and paysim faults, an orderd
#            (or paysim) SIGKILLed and restarted every KILL_EVERY, and
#            orderd's database connections terminated every 30s.
#
# Settings (environment): OUT (default bench/results), CLIENTS (4,16),
# BENCH_DURATION (10s), STORM_OPS (12000), STORM_DURATION (15m),
# KILL_EVERY (20s; 0 for none), SHOPPERS (16).
set -euo pipefail
cd "$(dirname "$0")/.."

WHAT="${1:-bench}"
OUT="${OUT:-bench/results}"
CLIENTS="${CLIENTS:-4,16}"
BENCH_DURATION="${BENCH_DURATION:-10s}"
STORM_OPS="${STORM_OPS:-12000}"
STORM_DURATION="${STORM_DURATION:-15m}"
KILL_EVERY="${KILL_EVERY:-20s}"
SHOPPERS="${SHOPPERS:-16}"
PG="postgres://postgres@127.0.0.1:5432"

case "$WHAT" in bench|gobench|load|storm|all) ;; *) echo "usage: $0 [bench|gobench|load|storm|all]"; exit 2;; esac

PGBENCH="$(command -v pgbench || true)"
if [ -z "$PGBENCH" ]; then
  PGBENCH="$(ls /usr/lib/postgresql/*/bin/pgbench 2>/dev/null | head -n1 || true)"
fi
if [ -z "$PGBENCH" ] && [ "$WHAT" != storm ] && [ "$WHAT" != gobench ]; then
  echo "pgbench not found: apt-get install -y postgresql-contrib (or postgresql-client)"; exit 2
fi

mkdir -p "$OUT"
BIN="$(mktemp -d "${TMPDIR:-/tmp}/orderstorm-bench.XXXXXX")"
DBS=()
cleanup() {
  local status=$?
  for db in "${DBS[@]}"; do dropdb --if-exists --force -h 127.0.0.1 -U postgres "$db" 2>/dev/null || true; done
  rm -rf "$BIN"
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

if ! pg_isready -q -h 127.0.0.1 -p 5432 2>/dev/null; then
  pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql)" main start || true
  for _ in $(seq 1 30); do pg_isready -q -h 127.0.0.1 -p 5432 && break; sleep 1; done
fi

# fresh_db NAME creates a database for one step (dropped on exit) and sets
# URL. Not in a subshell, so that the trap sees DBS.
URL=""
fresh_db() {
  local db="orderstorm_$1_$$"
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
  echo "commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
  echo "go: $(go version)"
  echo "cpu: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')"
  echo "postgres: $(psql -h 127.0.0.1 -U postgres -Atc 'show server_version') (synchronous_commit=$(psql -h 127.0.0.1 -U postgres -Atc 'show synchronous_commit'), shared_buffers=$(psql -h 127.0.0.1 -U postgres -Atc 'show shared_buffers'))"
  echo "pgbench: $("${PGBENCH:-false}" --version 2>/dev/null || echo none)"
  echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
} | tee "$OUT/machine-$WHAT.txt"
# Benchmarks on 2 cores are only meaningful on an otherwise idle machine.
others="$(pgrep -f 'go test|\.test -test\.|pgbench' | grep -v "^$$\$" || true)"
if [ -n "$others" ]; then
  echo "WARNING: other test or benchmark processes are running; figures will be low and noisy:" | tee -a "$OUT/machine-$WHAT.txt"
  ps -o pid,etime,args -p $others | tee -a "$OUT/machine-$WHAT.txt" || true
fi

if [ "$WHAT" = bench ] || [ "$WHAT" = gobench ] || [ "$WHAT" = all ]; then
  echo "== go benchmarks: go test -run '^\$' -bench . -benchtime 2000x ./service/"
  ORDERLY_TEST_DATABASE_URL="$PG/test?sslmode=disable" go test -run '^$' -bench . -benchtime 2000x ./service/ | tee "$OUT/gobench.txt"
fi

if [ "$WHAT" = bench ] || [ "$WHAT" = load ] || [ "$WHAT" = all ]; then
  echo "== load benchmark with pgbench (clients $CLIENTS, $BENCH_DURATION per phase)"
  fresh_db bench
  "$BIN/orderstorm" -mode bench -spawn 1 -bin-dir "$BIN" -database-url "$URL" \
    -pgbench "$PGBENCH" -bench-sql bench -bench-clients "$CLIENTS" -bench-duration "$BENCH_DURATION" \
    -json "$OUT/bench.json" -svg "$OUT/bench.svg" | tee "$OUT/bench.txt"
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
