#!/bin/sh
# compression.sh - what compressed answers cost and save (docs/CONFIG.md
# "Compressed answers"): the same server, the same load, with and without
# `Accept-Encoding: gzip`, alternating, ROUNDS times.
#
# One batchgate (1 IO thread, pinned to one core; batchgate-load on the
# other) serves two models:
# - "wide": the synthetic backend, 384 outputs a row (the size of a MiniLM
#   embedding), 50 us a batch: the gateway's own work is nearly all there
#   is, so this is the worst case for compressing on the IO thread;
# - all-MiniLM-L6-v2 through /v1/embeddings, one sentence a request, when
#   scripts/get-model minilm has laid it out: the case compression is for.
# Each cell: median throughput over rounds, p50 and p99, the server's CPU
# per 1000 answers and the bytes of one answer; then the ratios gzip/plain.
#
#   loadgen/bench/compression.sh                 # 3 rounds x 8 s, 16 connections
#   ROUNDS=5 DURATION=10 CONNS=32 loadgen/bench/compression.sh
set -eu
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
. "$ROOT/loadgen/bench/lib.sh"
BIN=${BATCHGATE_BIN:-$ROOT/build/batchgate}
LOAD=${BATCHGATE_LOAD:-$ROOT/build/batchgate-load}
DURATION=${DURATION:-8}
ROUNDS=${ROUNDS:-3}
CONNS=${CONNS:-16}
MINILM=${MINILM:-$HOME/.cache/batchgate/models/all-MiniLM-L6-v2}
[ -x "$BIN" ] && [ -x "$LOAD" ] || { echo "compression: build first (make)" >&2; exit 1; }

bg_workdir compression
bg_pin_cpus
mkdir -p "$WORK/repo/wide"
cat > "$WORK/repo/wide/config.json" <<'EOF'
{"name": "wide", "backend": "synthetic",
 "inputs": [{"name": "x", "datatype": "FP32", "shape": [4]}],
 "outputs": [{"name": "y", "datatype": "FP32", "shape": [384]}],
 "batching": {"max_batch_size": 8}, "synthetic": {"base_us": 50, "per_row_us": 0}}
EOF
MODELS="wide"
if [ -f "$MINILM/config.json" ]; then
    ln -s "$MINILM" "$WORK/repo/minilm"
    MODELS="wide minilm"
else
    echo "compression: $MINILM not found (scripts/get-model minilm): the embeddings row is left out" >&2
fi
printf '{"model": "minilm", "input": "%s"}' \
    "batchgate stands at the front door of the devices and decides batch by batch what runs where" \
    > "$WORK/embed.json"
printf '{"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 4], "data": [[0.318, 1.772, 0.125, 2.5]]}]}' \
    > "$WORK/wide.json"

$SERVER_CPU "$BIN" --models "$WORK/repo" --listen 127.0.0.1:0 --grpc-listen off --io-threads 1 \
    --config /dev/stdin 2>"$WORK/bg.log" <<EOF &
{"state_dir": "$WORK/state"}
EOF
SRV=$!
PIDS="$PIDS $SRV"
PORT=$(bg_wait_port "$WORK/bg.log" compression)

target() {   # model -> "path body"
    case "$1" in
    wide) echo "/v2/models/wide/infer $WORK/wide.json" ;;
    *) echo "/v1/embeddings $WORK/embed.json" ;;
    esac
}
cpu_ticks() { awk '{print $14 + $15}' "/proc/$SRV/stat"; }

run() {   # model coding -> "throughput p50_ms p99_ms cpu_ms_per_1000 bytes"
    set -- "$1" "$2" $(target "$1")
    acc=""
    [ "$2" = gzip ] && acc="Accept-Encoding: gzip"
    bytes=$(curl -s -o /dev/null -w '%{size_download}' ${acc:+-H "$acc"} \
        -H 'Content-Type: application/json' --data-binary "@$4" "http://127.0.0.1:$PORT$3")
    t0=$(cpu_ticks)
    $CLIENT_CPU "$LOAD" --url "http://127.0.0.1:$PORT$3" --method POST --body "$4" \
        --header 'Content-Type: application/json' ${acc:+--header "$acc"} \
        --concurrency "$CONNS" --duration "$DURATION" --warmup 1 --quiet \
        --json "$WORK/run.json" >/dev/null
    t1=$(cpu_ticks)
    python3 - "$WORK/run.json" "$((t1 - t0))" "$(getconf CLK_TCK)" "$bytes" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))["steps"][0]
n = sum(v for k, v in s["codes"].items() if k == "200")
bad = sum(v for k, v in s["codes"].items() if k != "200") + s["errors"]
if bad:
    sys.exit("compression: %d requests failed: %r" % (bad, s["codes"]))
ticks, hz = int(sys.argv[2]), int(sys.argv[3])
# The CPU counts the warmup second too: per answer over warmup + window.
span = s.get("span_s", s["duration_s"])   # the window and the wait for its answers
total = n * (1 + span) / span
print("%.1f %.3f %.3f %.2f %s" % (s["throughput"], s["latency_us"]["p50"] / 1000,
                                  s["latency_us"]["p99"] / 1000,
                                  1000.0 * ticks / hz * 1000 / total, sys.argv[4]))
PY
}

echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
echo "batchgate-load --concurrency $CONNS, ${DURATION}s x $ROUNDS rounds each, alternating; batchgate 1 IO thread${SERVER_CPU:+, pinned to one core, the load on the other}; compression level 1 (default)"
: > "$WORK/cells"
i=1
while [ "$i" -le "$ROUNDS" ]; do
    for m in $MODELS; do
        order="plain gzip"
        [ $((i % 2)) -eq 0 ] && order="gzip plain"
        for c in $order; do
            echo "$m $c $(run "$m" "$c")" >> "$WORK/cells"
        done
    done
    i=$((i + 1))
done
python3 - "$WORK/cells" <<'PY'
import statistics, sys
cells = {}
for line in open(sys.argv[1]):
    m, c, *v = line.split()
    cells.setdefault((m, c), []).append([float(x) for x in v])
med = {k: [statistics.median(col) for col in zip(*v)] for k, v in cells.items()}
print("%-7s %-6s %10s %8s %8s %14s %10s" % ("model", "answer", "req/s", "p50 ms", "p99 ms",
                                             "CPU ms/1000", "bytes"))
for (m, c), v in med.items():
    print("%-7s %-6s %10.0f %8.3f %8.3f %14.1f %10.0f" % (m, c, *v))
for m in dict.fromkeys(k[0] for k in med):
    p, g = med[(m, "plain")], med[(m, "gzip")]
    print("ratio gzip/plain, %s: throughput %.3fx, p50 %.2fx, p99 %.2fx, server CPU per answer "
          "%.2fx, bytes %.3fx" % (m, g[0] / p[0], g[1] / p[1], g[2] / p[2], g[3] / p[3],
                                  g[4] / p[4]))
PY
