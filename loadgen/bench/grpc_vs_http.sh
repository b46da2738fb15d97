#!/bin/sh
# grpc_vs_http.sh - Triton's perf_analyzer, unmodified, against batchgate
# over gRPC and over HTTP: the same model, the same load, side by side.
#
# One batchgate (1 IO thread, pinned to one core; perf_analyzer on the other)
# serves the bundled digits model. perf_analyzer (scripts/fetch-perf-analyzer:
# the build in tritonclient 2.51.0, the newest that runs on Debian 12) runs a
# concurrency sweep with `-i grpc`, `-i grpc --streaming` (ModelStreamInfer)
# and `-i http` in turn, ROUNDS times, rotating which goes first; each cell
# is the median over rounds of perf_analyzer's own stable measurement
# (throughput, p50 and p99 latency), with the ratio to HTTP's throughput.
#
#   loadgen/bench/grpc_vs_http.sh                       # c = 1 8 32, 2 rounds
#   CONC="1 4 16 64" ROUNDS=3 INTERVAL_MS=5000 loadgen/bench/grpc_vs_http.sh
set -eu

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
. "$ROOT/loadgen/bench/lib.sh"
BIN=${BATCHGATE_BIN:-$ROOT/build/batchgate}
CONC=${CONC:-1 8 32}
ROUNDS=${ROUNDS:-2}
INTERVAL_MS=${INTERVAL_MS:-3000}
BATCH=${BATCH:-1}

[ -x "$BIN" ] || { echo "grpc_vs_http: $BIN not built; run make" >&2; exit 1; }
PA=$("$ROOT/scripts/fetch-perf-analyzer" | tail -1)

bg_workdir grpc
bg_pin_cpus
GPORT=$(free_port)
$SERVER_CPU "$BIN" --models "$ROOT/models" --listen 127.0.0.1:0 --grpc-listen "127.0.0.1:$GPORT" \
    --io-threads 1 2>"$WORK/bg.log" &
PIDS="$PIDS $!"
PORT=$(bg_wait_port "$WORK/bg.log" grpc_vs_http)

run() {   # protocol concurrency -> "throughput p50_ms p99_ms"
    case "$1" in
    grpc) set -- "$2" -i grpc -u "127.0.0.1:$GPORT" ;;
    stream) set -- "$2" -i grpc --streaming -u "127.0.0.1:$GPORT" ;;
    *) set -- "$2" -i http -u "127.0.0.1:$PORT" ;;
    esac
    c=$1
    shift
    if ! $CLIENT_CPU "$PA" -m digits "$@" -b "$BATCH" \
        --concurrency-range "$c:$c" --measurement-interval "$INTERVAL_MS" \
        --percentile 99 --stability-percentage "${STABILITY:-25}" --max-trials 20 -f "$WORK/pa.csv" >"$WORK/pa.log" 2>&1; then
        echo "grpc_vs_http: perf_analyzer $* failed:" >&2
        cat "$WORK/pa.log" >&2
        exit 1
    fi
    python3 - "$WORK/pa.csv" <<'PY'
import csv, sys
row = next(csv.DictReader(open(sys.argv[1])))
print("%s %.3f %.3f" % (row["Inferences/Second"], float(row["p50 latency"]) / 1e3,
                        float(row["p99 latency"]) / 1e3))
PY
}

echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
echo "perf_analyzer $("$PA" --version 2>&1 | head -1 | sed 's/Perf Analyzer Version //'), model digits, batch $BATCH, measurement interval $INTERVAL_MS ms, $ROUNDS rounds, batchgate 1 IO thread${SERVER_CPU:+ (server and client on separate cores)}"
ALL=""
i=1
while [ "$i" -le "$ROUNDS" ]; do
    for c in $CONC; do
        case $((i % 3)) in
        1) order="grpc stream http" ;;
        2) order="http grpc stream" ;;
        *) order="stream http grpc" ;;
        esac
        for p in $order; do
            ALL="$ALL
$p $c $(run "$p" "$c")"
        done
    done
    i=$((i + 1))
done
printf '%s\n' "$ALL" | python3 -c '
import statistics, sys
cells = {}
for line in sys.stdin:
    f = line.split()
    if len(f) == 5:
        cells.setdefault((f[0], int(f[1])), []).append(tuple(map(float, f[2:])))
med = {k: [statistics.median(x[i] for x in v) for i in range(3)] for k, v in cells.items()}
print("| concurrency | HTTP infer/s | gRPC infer/s | gRPC / HTTP | stream infer/s | stream / HTTP | p50 ms HTTP / gRPC / stream | p99 ms HTTP / gRPC / stream |")
print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
for c in sorted({k[1] for k in med}):
    h, g, st = med[("http", c)], med[("grpc", c)], med[("stream", c)]
    print("| %d | %.0f | %.0f | %.2f | %.0f | %.2f | %.3f / %.3f / %.3f | %.3f / %.3f / %.3f |"
          % (c, h[0], g[0], g[0] / h[0], st[0], st[0] / h[0], h[1], g[1], st[1], h[2], g[2], st[2]))
'
