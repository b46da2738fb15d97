#!/bin/sh
# llm_cpu.sh - batchgate's CPU time per streamed token through an LLM pool:
# CONC concurrent streams of TOKENS tokens each from simulated endpoints
# (tests/llmsim/llmsim.py at a high --speed, so the gateway, not the
# servers, sets the pace), batchgate's user+system CPU time (from
# /proc/PID/stat) over the step divided by the tokens the load generator
# received. batchgate runs on one IO thread.
#
#   loadgen/bench/llm_cpu.sh     [ENDPOINTS=4 CONC=64 TOKENS=256 DURATION=20 SPEED=50]
set -eu
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
. "$HERE/lib.sh"

BIN=${BATCHGATE_BIN:-$ROOT/build/batchgate}
LOAD_BIN=${LOAD_BIN:-$ROOT/build/batchgate-load}
N=${ENDPOINTS:-4}
CONC=${CONC:-64}
TOKENS=${TOKENS:-256}
DUR=${DURATION:-20}
SPEED=${SPEED:-50}

bg_workdir llm-cpu
python3 "$ROOT/tests/llmsim/llmsim.py" --endpoints "$N" --speed "$SPEED" >"$WORK/sim.log" 2>&1 &
PIDS="$PIDS $!"
for _ in $(seq 100); do grep -q "llmsim: ready" "$WORK/sim.log" && break; sleep 0.1; done
urls=$(sed -n 's/^llmsim: endpoint [0-9]* on \(.*\)$/"http:\/\/\1"/p' "$WORK/sim.log" | paste -sd, -)
mkdir -p "$WORK/models/sim"
printf '{"backend": "openai", "served_model_name": "llmsim", "endpoints": [%s]}\n' "$urls" \
    >"$WORK/models/sim/config.json"
"$BIN" --models "$WORK/models" --listen 127.0.0.1:0 --io-threads 1 >"$WORK/bg.log" 2>&1 &
BG=$!
PIDS="$PIDS $BG"
port=$(bg_wait_port "$WORK/bg.log" llm_cpu)
cpu() { awk '{print $14 + $15}' "/proc/$BG/stat"; }
c0=$(cpu)
"$LOAD_BIN" --url "http://127.0.0.1:$port" --openai chat --model sim \
    --synthetic "in=50:10,out=$TOKENS:0" --max-tokens "$TOKENS" --concurrency "$CONC" \
    --duration "$DUR" --warmup 0 --json "$WORK/run.json" >"$WORK/run.txt" 2>&1 ||
    { cat "$WORK/run.txt" >&2; exit 1; }
c1=$(cpu)
python3 - "$WORK/run.json" "$((c1 - c0))" "$(getconf CLK_TCK)" "$DUR" <<'EOF'
import json, sys
s = json.load(open(sys.argv[1]))["steps"][0]
ticks, hz, dur = int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
tok = s["llm"]["output_tokens"]
cpu = ticks / hz
print("llm_cpu: %d answers, %d tokens streamed (%.0f tokens/s), ITL p50 %.2f ms, errors %d"
      % (s["llm"]["requests"], tok, tok / dur, s["llm"]["itl_ms"]["p50"], s["errors"]))
print("llm_cpu: batchgate used %.2f s of CPU: %.1f us per streamed token (%.1f%% of one core)"
      % (cpu, 1e6 * cpu / max(1, tok), 100 * cpu / dur))
EOF
