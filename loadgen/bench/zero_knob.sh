#!/bin/sh
# zero_knob.sh - does the default batching policy need tuning? (issue #15)
#
# One small MLP (256 -> 512 -> 512 -> 128, F32, random weights from
# scripts/make_mlp.py, 1 instance) is served by one batchgate in six ways
# that share its weights file:
#   auto   the default: no batching field set but max_batch_size 64
#          (policy "adaptive", max_queue_delay_us left at its default)
#   off    batching off: max_batch_size 1, every request a batch of one.
#          (Not max_queue_delay_us 0: with max_batch_size 64 that still
#          batches whatever queued while the instance was busy, which is
#          close to what the adaptive policy does; max_batch_size 1 is what
#          "no dynamic batching" means in Triton.)
#   dNNN   the fixed delay NNN us, as configured before the adaptive policy
#          (policy "deadline", the former default), for each of DELAYS
# A closed-loop sweep (batchgate-load --concurrency N, single-row requests)
# goes through LEVELS; at each level the six run back to back, so every
# comparison is side by side, and the sweep is repeated ROUNDS times with
# the order of the six rotated each round (on a shared 2-core VM single
# windows of the same config move by 20% and more). Each figure is the
# median over the rounds. "fixed" is the best fixed delay at that level
# (highest median throughput). Printed per level: throughput, p50 and p99
# of each, and default / max(off, fixed) throughput. Targets (issue #15):
# that ratio >= 0.90 at every level, and the default's p50 at concurrency 1
# within 1.2x of batching off.
#
#   loadgen/bench/zero_knob.sh          # 3 rounds x 7 levels x 6 configs x (1+2 s): ~7 min
#   DURATION=4 ROUNDS=5 loadgen/bench/zero_knob.sh
#   LEVELS="1 32" DELAYS="500 2000" loadgen/bench/zero_knob.sh
set -eu

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
. "$ROOT/loadgen/bench/lib.sh"
BIN=${BATCHGATE_BIN:-$ROOT/build/batchgate}
LOAD=${BATCHGATE_LOAD:-$ROOT/build/batchgate-load}
DURATION=${DURATION:-2}
WARMUP=${WARMUP:-1}
ROUNDS=${ROUNDS:-3}
LEVELS=${LEVELS:-1 2 4 8 16 32 64}
DELAYS=${DELAYS:-250 500 1000 2000}
DIMS=${DIMS:-256,512,512,128}

[ -x "$BIN" ] || { echo "zero_knob: $BIN not built; run make" >&2; exit 1; }
[ -x "$LOAD" ] || { echo "zero_knob: $LOAD not built; run make" >&2; exit 1; }

bg_workdir zero_knob

python3 "$ROOT/scripts/make_mlp.py" "$WORK/models/auto" --dims "$DIMS" --max-batch 64 >/dev/null
# model folder name, then the batching object it gets
variant() {
    mkdir -p "$WORK/models/$1"
    [ -e "$WORK/models/$1/model.safetensors" ] ||
        ln -s ../auto/model.safetensors "$WORK/models/$1/model.safetensors"
    python3 - "$WORK/models/auto/config.json" "$WORK/models/$1/config.json" "$1" "$2" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
c["name"] = sys.argv[3]
c["batching"] = json.loads(sys.argv[4])
json.dump(c, open(sys.argv[2], "w"), indent=1)
PY
}
variant auto '{"max_batch_size": 64}'
variant off '{"max_batch_size": 1}'
CONFIGS="auto off"
for d in $DELAYS; do
    variant "d$d" "{\"max_batch_size\": 64, \"max_queue_delay_us\": $d, \"policy\": \"deadline\"}"
    CONFIGS="$CONFIGS d$d"
done

"$BIN" --models "$WORK/models" --listen 127.0.0.1:0 --io-threads 1 2>"$WORK/bg.log" &
PIDS="$PIDS $!"
PORT=$(bg_wait_port "$WORK/bg.log" zero_knob)

run() {   # model concurrency -> "rps p50_ms p99_ms bad mean_batch"
    "$LOAD" --url "http://127.0.0.1:$PORT" --model "$1" --concurrency "$2" \
        --duration "$DURATION" --warmup "$WARMUP" --quiet --json "$WORK/step.json" >/dev/null
    python3 - "$WORK/step.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))["steps"][0]
bad = sum(v for k, v in s["codes"].items() if not k.startswith("2")) + s["errors"]
srv = s.get("server", {})
print(f'{s["throughput"]:.1f} {s["latency_us"]["p50"] / 1e3:.3f} {s["latency_us"]["p99"] / 1e3:.3f} '
      f'{bad} {srv.get("rows_per_batch", 0):.2f}')
PY
}

echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'); load: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "model $DIMS F32, 1 instance, 1 IO thread; batchgate-load --concurrency N --duration $DURATION --warmup $WARMUP, single rows, $ROUNDS rounds"
echo "configs: $CONFIGS (off: max_batch_size 1; dNNN: policy deadline, max_queue_delay_us NNN)"
RES=""
ORDER=$CONFIGS
r=1
while [ "$r" -le "$ROUNDS" ]; do
    for c in $LEVELS; do
        line="  round $r c=$c:"
        for m in $ORDER; do
            set -- $(run "$m" "$c")
            [ "$4" = 0 ] || echo "  warning: $m at concurrency $c: $4 non-2xx answers or errors" >&2
            RES="$RES$c $m $1 $2 $3 $5
"
            line="$line $m $1/s $2 ms;"
        done
        echo "$line"
    done
    ORDER="$(echo "$ORDER" | cut -d' ' -f2-) $(echo "$ORDER" | cut -d' ' -f1)"   # rotate
    r=$((r + 1))
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%s' "$RES" | python3 -c '
import statistics, sys
runs = {}
for line in sys.stdin:
    f = line.split()
    if len(f) == 6:
        runs.setdefault(int(f[0]), {}).setdefault(f[1], []).append(tuple(map(float, f[2:])))
rows = {c: {m: tuple(statistics.median(x[k] for x in v) for k in range(4)) for m, v in ms.items()}
        for c, ms in runs.items()}
print()
print("medians over the rounds (req/s, p50 ms, p99 ms, rows per batch):")
for c in sorted(rows):
    print("  c=%d " % c + "; ".join("%s %.0f %.3f %.3f %.2f" % ((m,) + rows[c][m]) for m in rows[c]))
print()
print("| conc | default req/s, p50/p99 ms | off req/s, p50/p99 ms | best fixed | req/s, p50/p99 ms "
      "| default / max(off, fixed) | default p50 / off p50 |")
print("| ---: | --- | --- | --- | --- | ---: | ---: |")
worst, fails = 9.9, []
for c in sorted(rows):
    r = rows[c]
    fixed = max((k for k in r if k.startswith("d")), key=lambda k: r[k][0])
    a, o, f = r["auto"], r["off"], r[fixed]
    ratio = a[0] / max(o[0], f[0])
    worst = min(worst, ratio)
    if ratio < 0.90:
        fails.append("throughput at c=%d: %.3fx" % (c, ratio))
    print(f"| {c} | {a[0]:.0f}, {a[1]:.2f}/{a[2]:.2f} | {o[0]:.0f}, {o[1]:.2f}/{o[2]:.2f} | "
          f"{fixed[1:]} us | {f[0]:.0f}, {f[1]:.2f}/{f[2]:.2f} | {ratio:.3f}x | {a[1] / o[1]:.2f}x |")
first = min(rows)
p50 = rows[first]["auto"][1] / rows[first]["off"][1]
if first == 1 and p50 > 1.2:
    fails.append("p50 at c=1: %.2fx of batching off" % p50)
print()
print("worst default / max(off, best fixed) throughput: %.3fx (target >= 0.90)" % worst)
print("default p50 / off p50 at c=%d: %.2fx (target <= 1.2 at c=1)" % (first, p50))
print("targets: " + ("met" if not fails else "NOT met: " + "; ".join(fails)))
'
