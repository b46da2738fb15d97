#!/bin/sh
# grpc_vs_http.sh - Triton's perf_analyzer, unmodified, against batchgate
# over gRPC and over HTTP: the same model, the same load, side by side.
#
# One batchgate (1 IO thread, pinned to one core) serves the bundled digits
# model; perf_analyzer is not pinned: its synchronous HTTP client, held to
# one core with 8 or more requests in flight, starves its own measuring
# thread (a 2 s pass stretches past 20 s and never stabilizes), so it may
# use both cores, the server's included. perf_analyzer (scripts/fetch-perf-analyzer:
# the build in tritonclient 2.51.0, the newest that runs on Debian 12) runs a
# concurrency sweep with `-i grpc`, `-i grpc --streaming` (ModelStreamInfer)
# and `-i http` in turn, ROUNDS times, rotating which goes first; each cell
# is the median over rounds of perf_analyzer's own stable measurement
# (throughput, p50 and p99 latency), with the ratio to HTTP's throughput.
#
#   loadgen/bench/grpc_vs_http.sh                       # c = 1 8 32, 2 rounds
#   CONC="1 4 16 64" ROUNDS=3 INTERVAL_MS=5000 loadgen/bench/grpc_vs_http.sh
# A perf_analyzer run that has not ended after PA_TIMEOUT seconds (300)
# fails the script, saying so, rather than holding the machine.
# perf_analyzer stabilizes on throughput and average latency (its
# default): with --percentile 99 it sorts every request it has seen at each
# pass, and at 10-20 thousand requests a second on one core its passes grow
# from 2 s to minutes; p50 and p99 still come from its report.
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
CLIENT_CPU=""   # above
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
    if ! $CLIENT_CPU timeout "${PA_TIMEOUT:-300}" "$PA" -m digits "$@" -b "$BATCH" \
        --concurrency-range "$c:$c" --measurement-interval "$INTERVAL_MS" \
        --stability-percentage "${STABILITY:-25}" --max-trials 20 -f "$WORK/pa.csv" >"$WORK/pa.log" 2>&1; then
        echo "grpc_vs_http: perf_analyzer $* failed:" >&2
        cat "$WORK/pa.log" >&2
        exit 1
    fi
    pa_cell "$WORK/pa.csv"
}

echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
echo "perf_analyzer $("$PA" --version 2>&1 | head -1 | sed 's/Perf Analyzer Version //'), model digits, batch $BATCH, measurement interval $INTERVAL_MS ms, $ROUNDS rounds, batchgate 1 IO thread${SERVER_CPU:+ pinned to one core, perf_analyzer on both}"
pa_sweep "http grpc stream" > "$WORK/cells"
pa_table "http=HTTP grpc=gRPC stream=stream" < "$WORK/cells"
