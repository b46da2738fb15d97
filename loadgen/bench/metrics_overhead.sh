#!/bin/sh
# metrics_overhead.sh - what scraping /metrics every second costs.
#
# wrk drives single-row KServe v2 requests to the bundled digits model (the
# hot path records request, queue, compute and batch statistics on every
# request) for DURATION seconds, alternately without and with a scraper that
# fetches /metrics once a second, ROUNDS times each. Prints the throughput of
# each run and the ratio with / without (target: >= 0.98).
#
#   loadgen/bench/metrics_overhead.sh          # 3 rounds x 10 s, 32 connections
set -eu
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
. "$ROOT/loadgen/bench/lib.sh"
BIN=${BATCHGATE_BIN:-$ROOT/build/batchgate}
DURATION=${DURATION:-10}
ROUNDS=${ROUNDS:-3}
CONNS=${CONNS:-32}
command -v wrk >/dev/null || { echo "metrics_overhead: wrk not found; run scripts/install-deps bench" >&2; exit 1; }

bg_workdir metrics

"$BIN" --models "$ROOT/models" --listen 127.0.0.1:0 --io-threads 1 2>"$WORK/bg.log" &
PIDS="$PIDS $!"
PORT=$(bg_wait_port "$WORK/bg.log" metrics_overhead)
digits_post_lua "$WORK/post.lua"
run() {
    wrk -t1 -c"$CONNS" -d"${DURATION}s" -s "$WORK/post.lua" "http://127.0.0.1:$PORT/v2/models/digits/infer" |
        wrk_rps
}
echo "machine: $(nproc) cores; digits model, wrk -t1 -c$CONNS -d${DURATION}s, 1 IO thread"
OFF=""; ON=""
i=1
while [ "$i" -le "$ROUNDS" ]; do
    off=$(run)
    ( while :; do curl -s "http://127.0.0.1:$PORT/metrics" >/dev/null; sleep 1; done ) &
    SCRAPER=$!
    PIDS="$PIDS $SCRAPER"   # stopped on exit too, should the run fail
    on=$(run)
    kill "$SCRAPER"; wait "$SCRAPER" 2>/dev/null || true
    echo "round $i: without scraping $off req/s, scraping every 1 s $on req/s"
    OFF="$OFF $off"; ON="$ON $on"
    i=$((i + 1))
done
python3 -c "
import statistics, sys
off = statistics.median(map(float, '$OFF'.split())); on = statistics.median(map(float, '$ON'.split()))
print(f'median: without {off:.0f} req/s, with {on:.0f} req/s, ratio {on/off:.3f} (target >= 0.98)')"
