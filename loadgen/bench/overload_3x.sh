#!/bin/sh
# overload_3x.sh - 60 s at three times capacity, then half capacity: memory
# stays bounded (queue limits hold), answers that are accepted stay inside
# their budget, the excess is shed with 429/504, and service is normal again
# the moment the load drops.
#
# A synthetic model (one instance, sleeping 10 ms + 0.1 ms per row, batches
# up to 16: 1379 rows/s, a capacity that holds on a busy machine), queue
# limit 512, 100 ms budget per request. batchgate-load runs 3x capacity open
# loop for DURATION seconds, then 0.5x for 10 s; batchgate's RSS and its
# answer guard (docs/BATCHING.md) are sampled every second.
#
#   loadgen/bench/overload_3x.sh            # DURATION=60
set -eu
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
. "$ROOT/loadgen/bench/lib.sh"
BIN=${BATCHGATE_BIN:-$ROOT/build/batchgate}
LOAD=${BATCHGATE_LOAD:-$ROOT/build/batchgate-load}
DURATION=${DURATION:-60}
bg_workdir ov3
mkdir -p "$WORK/models/syn"
cat > "$WORK/models/syn/config.json" <<JSON
{"backend": "synthetic",
 "inputs": [{"name": "x", "datatype": "FP32", "shape": [4]}],
 "outputs": [{"name": "y", "datatype": "FP32", "shape": [3]}],
 "batching": {"max_batch_size": 16, "max_queue_delay_us": 2000, "max_queue_size": 512,
              "latency_budget_ms": 100},
 "synthetic": {"base_us": 10000, "per_row_us": 100}}
JSON
"$BIN" --models "$WORK/models" --listen 127.0.0.1:0 --io-threads 2 2>"$WORK/bg.log" &
BG_PID=$!
PIDS="$PIDS $BG_PID"
PORT=$(bg_wait_port "$WORK/bg.log" overload_3x)
CAP=1379
rss() { awk '/^VmRSS/ {print $2}' "/proc/$BG_PID/status"; }
echo "machine: $(nproc) cores; synthetic model 10 ms + 0.1 ms/row, max batch 16, capacity $CAP rows/s; queue limit 512; budget 100 ms"
echo "RSS before: $(rss) KiB"
guard() { curl -s "http://127.0.0.1:$PORT/metrics" | awk '/^batchgate_answer_guard_seconds\{model="syn"\}/ {print $2}'; }
( while kill -0 "$BG_PID" 2>/dev/null; do
      rss >>"$WORK/rss.txt" 2>/dev/null || true
      guard >>"$WORK/guard.txt" 2>/dev/null || true
      sleep 1
  done ) &
SAMPLER=$!
"$LOAD" --url "http://127.0.0.1:$PORT" --model syn --rate "$((CAP * 3)),$((CAP / 2))" \
    --duration "$DURATION" --warmup 1 --budget-ms 100 --quiet --json "$WORK/steps.json" >/dev/null
kill "$SAMPLER" 2>/dev/null || true
python3 - "$WORK/steps.json" "$WORK/rss.txt" "$DURATION" "$WORK/guard.txt" <<'PY'
import json, sys
steps = json.load(open(sys.argv[1]))["steps"]
rss = [int(l) for l in open(sys.argv[2]) if l.strip()]
guard = [float(l) * 1e3 for l in open(sys.argv[4]) if l.strip()]
for name, s in zip(("3x capacity (%s s)" % sys.argv[3], "then 0.5x (10 s)"), steps):
    c = {int(k): v for k, v in s["codes"].items()}
    ok = c.get(200, 0)
    print(f'{name:<22} sent {s["achieved_rate"]:7.0f}/s  200: {ok/s.get("span_s", s["duration_s"]):6.0f}/s  '
          f'goodput (200 within 100 ms) {s["goodput"]:6.0f}/s  429 {c.get(429, 0)}  504 {c.get(504, 0)}  '
          f'other {sum(v for k, v in c.items() if k not in (200, 429, 504))}  errors {s["errors"]}  '
          f'p99 (all answers) {s["latency_us"]["p99"]/1e3:.1f} ms  late sends {s.get("late_sends", 0)}')
    late = max(0, round(ok - s["goodput"] * s.get("span_s", s["duration_s"])))
    print(f'  accepted (200) answers later than the budget: {late:.0f} of {ok}')
print(f'RSS over the run: min {min(rss)} KiB, max {max(rss)} KiB, last {rss[-1]} KiB ({len(rss)} samples)')
if guard:
    g = sorted(guard)
    print(f'answer guard (batchgate_answer_guard_seconds, each second): median {g[len(g) // 2]:.1f} ms, '
          f'max {g[-1]:.1f} ms, last {guard[-1]:.1f} ms')
PY
echo "RSS after: $(rss) KiB"
