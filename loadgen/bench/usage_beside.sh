#!/bin/sh
# usage_beside.sh - does a year-long usage query slow the online requests
# beside it? Two batchgate binaries (A, B), one IO thread each, on a copy of
# a generated year of usage (usage_history: 10 tenants x 20 models, as
# usage_year.sh) and the bundled digits model: batchgate-load sends single-
# row infer requests at RATE for DURATION s while a client asks GET
# /dashboard/usage (open, no key) for the whole year by tenant, daily, back
# to back. Prints the infer p50/p99 and the usage answers of each, then the
# same load without the queries as the baseline.
#
#   loadgen/bench/usage_beside.sh OLD_BINARY NEW_BINARY [BUILD_DIR]
set -eu
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
. "$ROOT/loadgen/bench/lib.sh"
[ $# -ge 2 ] || { echo "usage: usage_beside.sh BINARY_A BINARY_B [BUILD_DIR]" >&2; exit 2; }
A=$(realpath "$1") B=$(realpath "$2")
BUILD=$(realpath "${3:-$ROOT/build}")
RATE=${RATE:-500} DURATION=${DURATION:-10}
bg_workdir beside
"$BUILD/usage_history" "$WORK/year" --days 365 --tenants 10 --models 20 --devices 4 \
    --minute-days 7 >/dev/null
now=$(date +%s)
from=$((now - 366 * 86400))
echo "machine: $(nproc) cores; digits infer at $RATE/s for ${DURATION}s, 1 IO thread; beside it GET /dashboard/usage over a year (10 tenants x 20 models), daily by tenant, back to back"
for side in A B; do
    bin=$A; [ "$side" = B ] && bin=$B
    cp -r "$WORK/year" "$WORK/state$side"
    printf '{"model_repository": "%s", "state_dir": "%s"}\n' "$ROOT/models" "$WORK/state$side" \
        > "$WORK/$side.json"
    "$bin" --config "$WORK/$side.json" --listen 127.0.0.1:0 --grpc-listen off --io-threads 1 \
        2>"$WORK/$side.log" &
    pid=$!
    PIDS="$PIDS $pid"
    port=$(bg_wait_port "$WORK/$side.log" usage_beside)
    for with in queries none; do
        : > "$WORK/q.times"
        if [ "$with" = queries ]; then
            ( end=$(( $(date +%s) + DURATION + 1 ))
              while [ "$(date +%s)" -lt "$end" ]; do
                  curl -s -o /dev/null -w '%{time_total}\n' \
                      "http://127.0.0.1:$port/dashboard/usage?from=$from&to=$now&step=86400&group_by=tenant" \
                      >> "$WORK/q.times"
              done ) &
            qpid=$!
        fi
        "$BUILD/batchgate-load" --url "http://127.0.0.1:$port" --model digits --rate "$RATE" \
            --duration "$DURATION" --warmup 1 --json "$WORK/l.json" >/dev/null 2>&1
        [ "$with" = queries ] && wait "$qpid"
        python3 - "$side" "$with" "$WORK/l.json" "$WORK/q.times" <<'PY'
import json, sys, statistics
side, with_, lj, qt = sys.argv[1:]
d = json.load(open(lj))
lat = {k: v / 1000.0 for k, v in d["steps"][0]["latency_us"].items()}
qs = [float(x) * 1000 for x in open(qt).read().split()]
extra = ("; %d usage answers, median %.0f ms" % (len(qs), statistics.median(qs))) if qs else ""
print("%s (%s): infer p50 %.2f ms  p99 %.2f ms  max %.2f ms%s" % (
    side, "with the queries" if with_ == "queries" else "alone", lat["p50"], lat["p99"],
    lat["max"], extra))
PY
    done
    kill "$pid"
    wait "$pid" 2>/dev/null || true
done
