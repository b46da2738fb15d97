#!/bin/sh
# shm_vs_json.sh - the three ways Triton's clients send a large tensor, side
# by side, measured by Triton's perf_analyzer (unmodified, over HTTP):
#   json    --input-tensor-format json --output-tensor-format json
#   binary  the binary tensor extension (perf_analyzer's default)
#   shm     --shared-memory system: input and output in system shared
#           memory regions, the body carries only JSON parameters
#
# The model is a dense layer of 262144 FP32 inputs (1 MiB per row) to 8
# outputs, written by scripts/make_mlp.py into a temp folder, so the cost of
# carrying the input dominates and the compute is small. One batchgate (1 IO
# thread; pinned to one core, perf_analyzer on another, where there are
# enough). Each cell is the median over ROUNDS of perf_analyzer's own stable
# measurement, the order of the three rotating per round; ratios are to
# JSON's throughput.
#
#   loadgen/bench/shm_vs_json.sh                  # c = 1 4, 2 rounds
#   CONC="1 2 8" ROUNDS=3 INTERVAL_MS=4000 loadgen/bench/shm_vs_json.sh
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
CONC=${CONC:-1 4}
ROUNDS=${ROUNDS:-2}
INTERVAL_MS=${INTERVAL_MS:-3000}
INPUTS=${INPUTS:-262144}

[ -x "$BIN" ] || { echo "shm_vs_json: $BIN not built; run make" >&2; exit 1; }
PA=$("$ROOT/scripts/fetch-perf-analyzer" | tail -1)

bg_workdir shm
bg_pin_cpus
mkdir -p "$WORK/repo"
python3 "$ROOT/scripts/make_mlp.py" "$WORK/repo/wide" --name wide --dims "$INPUTS,8" \
    --max-batch 8 >/dev/null
# The same input for every mode: uniform numbers in [-1, 1) as JSON writes
# them (perf_analyzer's own random FP32 bytes include NaN, which JSON cannot
# carry).
python3 -c '
import json, random, sys
random.seed(1)
json.dump({"data": [{"input": [round(random.uniform(-1, 1), 7) for _ in range(int(sys.argv[1]))]}]},
          open(sys.argv[2], "w"))' "$INPUTS" "$WORK/data.json"
# Large bodies: about 2.5 MiB of JSON numbers per row.
printf '{"limits": {"max_body_bytes": 268435456}}\n' >"$WORK/cfg.json"
$SERVER_CPU "$BIN" --config "$WORK/cfg.json" --models "$WORK/repo" --listen 127.0.0.1:0 \
    --io-threads 1 2>"$WORK/bg.log" &
PIDS="$PIDS $!"
PORT=$(bg_wait_port "$WORK/bg.log" shm_vs_json)

run() {   # mode concurrency -> "throughput p50_ms p99_ms"
    case "$1" in
    json) set -- "$2" --input-tensor-format json --output-tensor-format json ;;
    shm) set -- "$2" --shared-memory system ;;
    *) set -- "$2" ;;
    esac
    c=$1
    shift
    if ! $CLIENT_CPU timeout "${PA_TIMEOUT:-300}" "$PA" -m wide -i http -u "127.0.0.1:$PORT" "$@" --input-data "$WORK/data.json" \
        --concurrency-range "$c:$c" --measurement-interval "$INTERVAL_MS" \
        --stability-percentage "${STABILITY:-25}" --max-trials 20 \
        -f "$WORK/pa.csv" >"$WORK/pa.log" 2>&1; then
        echo "shm_vs_json: perf_analyzer $* failed:" >&2
        cat "$WORK/pa.log" >&2
        exit 1
    fi
    pa_cell "$WORK/pa.csv"
}

echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
echo "perf_analyzer $("$PA" --version 2>&1 | head -1 | sed 's/Perf Analyzer Version //'), model wide (dense $INPUTS -> 8 FP32: $((INPUTS * 4 / 1024)) KiB in per row), batch 1, measurement interval $INTERVAL_MS ms, $ROUNDS rounds, batchgate 1 IO thread${SERVER_CPU:+ (server and client on separate cores)}"
pa_sweep "json binary shm" > "$WORK/cells"
pa_table "json=JSON binary=binary shm=shm" "shm/binary" < "$WORK/cells"
