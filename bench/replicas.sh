#!/usr/bin/env bash
# Read scaling with a streaming replica, measured with wrk in one run: the
# same orderd build, the same primary, once with reads on the primary only
# and once spread over primary + replica (ORDERD_DATABASE_REPLICA_URLS),
# for GET /v1/orders/{id} and GET /v1/orders?limit=20. Starts its own primary
# and standby (internal/pgpair; no apply delay) and removes them at the end.
#
#   bash bench/replicas.sh            # DURATION=10s CONNS=32 by default
set -euo pipefail
cd "$(dirname "$0")/.."
DURATION="${DURATION:-10s}"
CONNS="${CONNS:-32}"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/orderly-bench-replicas.XXXXXX")"
PIDS=()
cleanup() {
  set +e
  for pid in "${PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null; done
  for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null; done
  rm -rf "$WORK"
}
trap cleanup EXIT
go build -o "$WORK/pgpair" ./internal/pgpair/cmd/pgpair
go build -o "$WORK/orderd" ./cmd/orderd
"$WORK/pgpair" -db bench >"$WORK/pair.out" 2>"$WORK/pair.log" &
PIDS+=($!)
for _ in $(seq 1 600); do grep -q '^STANDBY_URL=' "$WORK/pair.out" && break; sleep 0.2; done
. <(sed 's/^/export /' "$WORK/pair.out")
KEY=sk_bench_replicas_1
start() { # name port extra-env...
  local name=$1 port=$2; shift 2
  env ORDERD_ADDR=127.0.0.1:$port ORDERD_DATABASE_URL="$PRIMARY_URL" ORDERD_API_KEYS="b:$KEY" ORDERD_LOG_LEVEL=warn \
    ORDERD_MAX_IN_FLIGHT=256 "$@" "$WORK/orderd" 2>"$WORK/$name.log" &
  PIDS+=($!)
  for _ in $(seq 1 100); do curl -sf "http://127.0.0.1:$port/healthz" >/dev/null && return; sleep 0.1; done
  echo "$name did not start"; cat "$WORK/$name.log"; exit 1
}
start primary-only 18181
start with-replica 18182 ORDERD_DATABASE_REPLICA_URLS="$STANDBY_URL"
for i in $(seq 1 200); do
  curl -s http://127.0.0.1:18181/v1/orders -H "Authorization: Bearer $KEY" -H 'Content-Type: application/json' \
    -d "{\"customer_id\":\"cus_$((i % 10))\",\"currency\":\"USD\",\"items\":[{\"sku\":\"book\",\"quantity\":1,\"unit_price\":$i}]}" >"$WORK/last.json"
done
ID=$(sed -E 's/.*"id":"([^"]+)".*/\1/' "$WORK/last.json")
sleep 2 # the replica replays the seed
echo "wrk -t2 -c$CONNS -d$DURATION; nproc $(nproc); $(date -u +%FT%TZ)"
for path in "/v1/orders/$ID" "/v1/orders?limit=20"; do
  for target in primary-only:18181 with-replica:18182; do
    out=$(wrk -t2 -c"$CONNS" -d"$DURATION" --latency -H "Authorization: Bearer $KEY" "http://127.0.0.1:${target#*:}$path")
    rps=$(echo "$out" | awk '/Requests\/sec/ {print $2}')
    p99=$(echo "$out" | awk '$1 == "99%" {print $2}')
    non2xx=$(echo "$out" | awk '/Non-2xx/ {print $NF}')
    printf '%-22s %-13s %10s req/s  p99 %8s  non-2xx %s\n' "${path%%\?*}$( [[ $path == *\?* ]] && echo '?limit=20')" "${target%%:*}" "$rps" "$p99" "${non2xx:-0}"
  done
done
