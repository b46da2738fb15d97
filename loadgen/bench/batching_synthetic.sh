#!/bin/sh
# batching_synthetic.sh - the batching gain at equal p99, on a device whose
# cost is known: a synthetic model that spins a core for 2 ms + 0.1 ms per
# row, served as `syn_b1` (max_batch_size 1) and `syn_b32` (32). For each,
# batchgate-load sweeps open-loop rates; the result is the highest rate
# whose p99 stays under P99_MS (25 ms), and the ratio of the two.
#
#   loadgen/bench/batching_synthetic.sh       # 5 s per step
set -eu
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
. "$ROOT/loadgen/bench/lib.sh"
BIN=${BATCHGATE_BIN:-$ROOT/build/batchgate}
LOAD=${BATCHGATE_LOAD:-$ROOT/build/batchgate-load}
DURATION=${DURATION:-5}
P99_MS=${P99_MS:-25}
bg_workdir bsyn
for mb in 1 32; do
    mkdir -p "$WORK/models/syn_b$mb"
    cat > "$WORK/models/syn_b$mb/config.json" <<JSON
{"backend": "synthetic",
 "inputs": [{"name": "x", "datatype": "FP32", "shape": [4]}],
 "outputs": [{"name": "y", "datatype": "FP32", "shape": [2]}],
 "batching": {"max_batch_size": $mb, "max_queue_delay_us": 2000},
 "synthetic": {"base_us": 2000, "per_row_us": 100, "mode": "spin"}}
JSON
done
"$BIN" --models "$WORK/models" --listen 127.0.0.1:0 --io-threads 1 2>"$WORK/bg.log" &
PIDS="$PIDS $!"
PORT=$(bg_wait_port "$WORK/bg.log" batching_synthetic)
echo "machine: $(nproc) cores; synthetic (spin) 2 ms + 0.1 ms/row; open-loop sweeps, ${DURATION}s per step; p99 limit ${P99_MS} ms"
best() {   # model rates -> the highest rate with p99 under the limit
    "$LOAD" --url "http://127.0.0.1:$PORT" --model "$1" --rate "$2" --duration "$DURATION" \
        --warmup 1 --drain-ms 3000 --json "$WORK/$1.json" --quiet | sed "s/^/  $1: /" >&2
    python3 - "$WORK/$1.json" "$P99_MS" <<'PY'
import json, sys
steps = json.load(open(sys.argv[1]))["steps"]
ok = [s["throughput"] for s in steps
      if s["latency_us"]["p99"] <= float(sys.argv[2]) * 1000 and s["errors"] == 0
      and all(k.startswith("2") for k in s["codes"])]
print(max(ok) if ok else 0)
PY
}
b1=$(best syn_b1 100,200,300,400,450)
b32=$(best syn_b32 1000,2000,3000,4000,5000,5500)
python3 -c "print(f'highest rate with p99 <= ${P99_MS} ms: unbatched {float($b1):.0f}/s, batched {float($b32):.0f}/s, ratio {float($b32)/max(float($b1),1):.1f}x')"
