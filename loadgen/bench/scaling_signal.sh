#!/bin/sh
# scaling_signal.sh - the scaling signal of docs/DEPLOY.md under a step in
# load: model_demand_rows_per_second / model_capacity_rows_per_second should
# read the replicas a model needs. One synthetic model (one instance, a
# batch of 8 rows in 28 ms: ~286 rows/s) is driven open loop at 1x its
# capacity for PHASE seconds, then at 3x; /metrics is read every 0.5 s.
# Prints the ratio over time and checks it against issue #19's target:
# after the step it reaches 3 +- 0.3 within 10 s and stays there.
#
#   loadgen/bench/scaling_signal.sh [BUILD_DIR]     # default: build
set -eu
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
. "$ROOT/loadgen/bench/lib.sh"
BUILD=$(realpath "${1:-$ROOT/build}")
PHASE=${PHASE:-20}
bg_workdir scaling
bg_pin_cpus
mkdir -p "$WORK/models/s"
cat > "$WORK/models/s/config.json" <<'JSON'
{"name": "s", "backend": "synthetic",
 "inputs": [{"name": "x", "datatype": "FP32", "shape": [4]}],
 "outputs": [{"name": "y", "datatype": "FP32", "shape": [3]}],
 "batching": {"max_batch_size": 8, "max_queue_size": 64},
 "synthetic": {"base_us": 20000, "per_row_us": 1000}}
JSON
printf '{"model_repository": "%s", "state_dir": "%s/state"}\n' "$WORK/models" "$WORK" > "$WORK/config.json"
$SERVER_CPU "$BUILD/batchgate" --config "$WORK/config.json" --listen 127.0.0.1:0 --io-threads 1 \
    2>"$WORK/log" &
PIDS="$PIDS $!"
PORT=$(bg_wait_port "$WORK/log" scaling_signal)
# The latency model learns from a few seconds at about capacity first.
$CLIENT_CPU "$BUILD/batchgate-load" --url "http://127.0.0.1:$PORT" --model s --rate 250 \
    --duration 3 --warmup 0 --quiet >/dev/null
cap=$(curl -s "http://127.0.0.1:$PORT/metrics" |
      sed -n 's/^batchgate_model_capacity_rows_per_second{model="s"} //p')
echo "capacity after warmup: $cap rows/s"
python3 - "$PORT" "$WORK/samples" <<'PY' &
import sys, time, urllib.request
port, out = sys.argv[1], sys.argv[2]
t0 = time.time()
with open(out, "w") as f:
    while time.time() - t0 < 600:
        try:
            text = urllib.request.urlopen("http://127.0.0.1:%s/metrics" % port, timeout=2).read().decode()
        except OSError:
            break
        v = {}
        for line in text.splitlines():
            for name in ("capacity", "demand"):
                p = 'batchgate_model_%s_rows_per_second{model="s"} ' % name
                if line.startswith(p):
                    v[name] = float(line[len(p):])
        f.write("%.3f %.3f %.3f\n" % (time.time(), v.get("demand", 0), v.get("capacity", 0)))
        f.flush()
        time.sleep(0.5)
PY
PIDS="$PIDS $!"
r1=$(python3 -c "print(round(float('$cap')))")
r3=$(python3 -c "print(round(3 * float('$cap')))")
$CLIENT_CPU "$BUILD/batchgate-load" --url "http://127.0.0.1:$PORT" --model s --rate "$r1" \
    --duration "$PHASE" --warmup 0 --drain-ms 0 --quiet >/dev/null
step=$(date +%s.%N)
$CLIENT_CPU "$BUILD/batchgate-load" --url "http://127.0.0.1:$PORT" --model s --rate "$r3" \
    --duration "$PHASE" --warmup 0 --drain-ms 0 --quiet >/dev/null || true
sleep 1
python3 - "$WORK/samples" "$step" "$PHASE" "$r1" "$r3" <<'PY'
import sys
rows = [tuple(map(float, l.split())) for l in open(sys.argv[1]) if l.strip()]
step, phase = float(sys.argv[2]), float(sys.argv[3])
print("offered: %s rows/s for %.0f s, then %s rows/s for %.0f s (open loop, Poisson)"
      % (sys.argv[4], phase, sys.argv[5], phase))
print("   t-step  demand  capacity  ratio")
for t, d, c in rows:
    if t >= step - phase and t <= step + phase and int((t - step) * 2) % 4 == 0:
        print("%8.1f %7.1f %9.1f %6.2f" % (t - step, d, c, d / c if c else 0))
ratio = lambda r: r[1] / r[2] if r[2] else 0
before = [ratio(r) for r in rows if step - 8 <= r[0] < step]
after = [r for r in rows if step <= r[0] <= step + phase]
follow = None
for i, r in enumerate(after):
    if all(abs(ratio(x) - 3) <= 0.3 for x in after[i:]):
        follow = r[0] - step
        break
steady = [ratio(r) for r in after if r[0] >= step + 12]
print("before the step (last 8 s): ratio %.2f .. %.2f" % (min(before), max(before)))
print("after the step, from 12 s: ratio %.2f .. %.2f (mean %.2f)"
      % (min(steady), max(steady), sum(steady) / len(steady)))
ok = follow is not None and follow <= 10
print("reaches 3 +- 0.3 and stays: %s" % ("after %.1f s" % follow if follow is not None else "never"))
print("scaling_signal: %s (target: within 10 s, 3 +- 0.3)" % ("ok" if ok else "MISSED"))
PY
