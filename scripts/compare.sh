#!/usr/bin/env bash
# relcache vs a real redis-server on the same relation workloads, with relcache-bench.
#
# Starts relcache (release build) and redis-server each on a free port, loads the same
# seeded dataset on both (relcache: one SET of a client-built table per user; Redis:
# SADD per user), then runs each workload ROUNDS times, alternating which server goes
# first, and writes the medians as a markdown table plus an SVG chart:
#   target/compare/compare.md, target/compare/chart.svg, target/compare/*.json
#
# Knobs (environment): USERS (100000), DURATION seconds per run (10), WARMUP (1),
# ROUNDS (3), CONNS (4), SEED (1), REDIS_TYPE (set|hash), PIN (1). A quick smoke run:
#   USERS=2000 DURATION=1 WARMUP=0 ROUNDS=1 scripts/compare.sh
#
# PIN=1 (the default on two or more cores) runs both servers on the last core and the
# client on the others (taskset), relcache with one loop: the same one core each, and
# a client that never waits for a core the server holds. Unpinned (PIN=0), the client
# and the servers share every core; the client is the heavier side here, and at
# saturation its threads wait whole scheduler ticks (4 ms) for a core, which is what
# the p99.9 of such a run then measures (docs/PERFORMANCE.md, Why pinned).
set -euo pipefail
cd "$(dirname "$0")/.."

USERS=${USERS:-100000}
DURATION=${DURATION:-10}
WARMUP=${WARMUP:-1}
ROUNDS=${ROUNDS:-3}
CONNS=${CONNS:-4}
SEED=${SEED:-1}
REDIS_TYPE=${REDIS_TYPE:-set}
PIN=${PIN:-1}
OUT=target/compare
REDIS_SERVER=${REDIS_SERVER:-$(command -v redis-server || true)}
[ -n "$REDIS_SERVER" ] || { echo "redis-server not found (apt-get install redis-server)" >&2; exit 1; }

echo "== building (release)"
cargo build --release --bin relcache-server -q
cargo build --release -p relcache-bench -q
BENCH=target/release/relcache-bench
mkdir -p "$OUT"
rm -f "$OUT"/*.json

port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
free_port() {
  local p
  for _ in $(seq 1 100); do
    p=$((20000 + RANDOM % 40000))
    if port_free "$p"; then echo "$p"; return; fi
  done
  echo "no free port found" >&2; exit 1
}
wait_port() {
  for _ in $(seq 1 200); do
    if ! port_free "$1"; then return; fi
    sleep 0.05
  done
  echo "server on port $1 did not come up" >&2; exit 1
}

# Cores: the servers get the last one, the client the rest.
SERVER_RUN=(); CLIENT_RUN=(); RELCACHE_THREADS=()
CORES=$(nproc)
if [ "$PIN" = 1 ] && [ "$CORES" -ge 2 ]; then
  command -v taskset >/dev/null || { echo "taskset not found (apt-get install util-linux)" >&2; exit 1; }
  SERVER_RUN=(taskset -c $((CORES - 1)))
  CLIENT_RUN=(taskset -c "0-$((CORES - 2))")
  RELCACHE_THREADS=(--threads 1)
  PLACEMENT="servers pinned to core $((CORES - 1)) (relcache with one loop), client to cores 0-$((CORES - 2))"
else
  PLACEMENT="servers and client unpinned, sharing all $CORES cores"
fi

RELCACHE_PID=""; REDIS_PID=""
cleanup() {
  [ -n "$RELCACHE_PID" ] && kill "$RELCACHE_PID" 2>/dev/null || true
  [ -n "$REDIS_PID" ] && kill "$REDIS_PID" 2>/dev/null || true
}
trap cleanup EXIT

RELCACHE_PORT=$(free_port)
"${SERVER_RUN[@]}" target/release/relcache-server --port "$RELCACHE_PORT" --loglevel warning \
  "${RELCACHE_THREADS[@]}" &
RELCACHE_PID=$!
REDIS_PORT=$(free_port)
"${SERVER_RUN[@]}" "$REDIS_SERVER" --port "$REDIS_PORT" --bind 127.0.0.1 --save '' --appendonly no \
  --loglevel warning >"$OUT/redis.log" 2>&1 &
REDIS_PID=$!
wait_port "$RELCACHE_PORT"
wait_port "$REDIS_PORT"
echo "== relcache on $RELCACHE_PORT, redis on $REDIS_PORT; $PLACEMENT"

DATA=(--users "$USERS" --seed "$SEED")
port_of() { if [ "$1" = relcache ]; then echo "$RELCACHE_PORT"; else echo "$REDIS_PORT"; fi; }

for t in relcache redis; do
  echo "== loading $t"
  "$BENCH" load --target "$t" --port "$(port_of "$t")" --redis-type "$REDIS_TYPE" \
    "${DATA[@]}" --flush -q
done

# label | options
SCENARIOS=(
  "batch100-P16|--mix batch=1 --batch 100 -P 16"
  "batch100-P1|--mix batch=1 --batch 100 -P 1"
  "check-P16|--mix check=1 -P 16"
  "load-on-miss|--mix load=1 -P 1 --always-miss --miss-ttl-ms 200"
  "mixed-90r-10w|--mix check=60,batch=30,follow=5,unfollow=5 -P 4"
)

FILES=()
for round in $(seq 1 "$ROUNDS"); do
  if [ $((round % 2)) -eq 1 ]; then ORDER=(relcache redis); else ORDER=(redis relcache); fi
  for s in "${SCENARIOS[@]}"; do
    label=${s%%|*}
    read -r -a opts <<<"${s#*|}"
    for t in "${ORDER[@]}"; do
      f="$OUT/$label-$t-r$round.json"
      echo "== round $round: $label on $t"
      "${CLIENT_RUN[@]}" "$BENCH" run --target "$t" --port "$(port_of "$t")" --redis-type "$REDIS_TYPE" \
        "${DATA[@]}" -c "$CONNS" --duration "$DURATION" --warmup "$WARMUP" \
        --label "$label" --json "$f" -q "${opts[@]}" | sed -n 2p
      FILES+=("$f")
    done
  done
done

{
  echo "# relcache vs Redis ($REDIS_TYPE): medians of $ROUNDS alternating rounds"
  echo
  echo "users=$USERS seed=$SEED connections=$CONNS duration=${DURATION}s warmup=${WARMUP}s;" \
    "$(nproc) cores, $(uname -sr); redis: $("$REDIS_SERVER" --version | awk '{print $3}');" \
    "$PLACEMENT"
  echo
} >"$OUT/compare.md"
"$BENCH" chart "${FILES[@]}" --out "$OUT/chart.svg" --markdown "$OUT/table.md" >/dev/null
cat "$OUT/table.md" >>"$OUT/compare.md"
rm -f "$OUT/table.md"
cat "$OUT/compare.md"
echo "== wrote $OUT/compare.md and $OUT/chart.svg"
