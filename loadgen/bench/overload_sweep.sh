#!/bin/sh
# overload_sweep.sh - goodput and p99 from 25% to 300% of capacity.
#
# A synthetic model (one instance, 2 ms + 0.1 ms per row, max_batch_size 32,
# so 6154 rows/s at full batches) behind batchgate; batchgate-load sweeps
# open-loop Poisson rates at 25, 50, 75, 100, 150, 200 and 300 % of that
# capacity with a 25 ms budget per request. A gateway that sheds honestly
# keeps goodput near capacity and p99 inside the budget past 100 %.
#
#   loadgen/bench/overload_sweep.sh          # 6 s per step (+1 s warmup)
set -eu
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
. "$ROOT/loadgen/bench/lib.sh"
BIN=${BATCHGATE_BIN:-$ROOT/build/batchgate}
LOAD=${BATCHGATE_LOAD:-$ROOT/build/batchgate-load}
DURATION=${DURATION:-6}
POLICY=${POLICY:-deadline}
bg_workdir overload
mkdir -p "$WORK/models/syn"
cat > "$WORK/models/syn/config.json" <<JSON
{"backend": "synthetic",
 "inputs": [{"name": "x", "datatype": "FP32", "shape": [4]}],
 "outputs": [{"name": "y", "datatype": "FP32", "shape": [2]}],
 "batching": {"max_batch_size": 32, "max_queue_delay_us": 5000, "policy": "$POLICY"},
 "synthetic": {"base_us": 2000, "per_row_us": 100, "mode": "spin"}}
JSON
"$BIN" --models "$WORK/models" --listen 127.0.0.1:0 --io-threads 1 2>"$WORK/bg.log" &
PIDS="$PIDS $!"
PORT=$(bg_wait_port "$WORK/bg.log" overload_sweep)
CAP=6154
RATES=$(python3 -c "print(','.join(str(round($CAP * p)) for p in (0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0)))")
echo "machine: $(nproc) cores; synthetic model (spin) 2 ms + 0.1 ms/row, max batch 32, capacity $CAP rows/s; policy $POLICY; budget 25 ms"
"$LOAD" --url "http://127.0.0.1:$PORT" --model syn --rate "$RATES" --duration "$DURATION" --warmup 1 \
    --budget-ms 25 --quiet --json "${JSON_OUT:-$WORK/sweep.json}" --svg "${SVG_OUT:-$WORK/sweep.svg}"
