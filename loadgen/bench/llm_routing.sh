#!/bin/sh
# llm_routing.sh - an LLM pool's endpoint picker (policy "score": load and
# prefix affinity) against round robin, side by side in one run, on the same
# simulated vLLM-like endpoints (tests/llmsim/llmsim.py, docs/LLMSIM.md) and
# the same workload: several long shared prefixes interleaved, mixed lengths,
# streamed (batchgate-load --openai chat, docs/LOADGEN.md).
#
#   loadgen/bench/llm_routing.sh        [ENDPOINTS=100 SPEED=0.1 DURATION=60 WARMUP=15 LOAD=0.85
#                                        KV_BLOCKS=512 POLICIES="round_robin score"
#                                        CONC_PER_ENDPOINT="2 4 8" CAP=
#                                        SCORE_CONFIG='"saturation": {"waiting": 8}'
#                                        SYNTHETIC=in=100:80,out=16:4,prefixes=8,prefix_len=1000]
#
# First round robin runs closed-loop with 2, 4 and 8 requests per endpoint
# always outstanding: the most it completes per second there is the pool's
# capacity under round robin (more outstanding fills the servers' KV caches
# and lowers it again). Then each
# policy runs at LOAD x that capacity (80-90% load, the issue's point), the
# simulator restarted before each run so every policy starts from cold
# caches. Prints one row per run and the ratios score / round robin.
#
# WARMUP: the first seconds of each run are not measured. The simulator runs
# at a tenth of its model's speed, so a pool's cold start (every prefix
# computed on its first endpoints, 2.6 s a prefill here) lasts seconds of
# wall time: 15 s is 1.5 s of the model's, as the virtual-clock trace in
# tests/unit/test_picker.c leaves out its first 5 s at full speed.
set -eu
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
. "$HERE/lib.sh"

BIN=${BATCHGATE_BIN:-$ROOT/build/batchgate}
LOAD_BIN=${LOAD_BIN:-$ROOT/build/batchgate-load}
N=${ENDPOINTS:-100}
SPEED=${SPEED:-0.1}
DUR=${DURATION:-60}
WARM=${WARMUP:-15}
LOAD=${LOAD:-0.85}
KV=${KV_BLOCKS:-512}
CONC=${CONC_PER_ENDPOINT:-2 4 8}
POLICIES=${POLICIES:-round_robin score}
SYN=${SYNTHETIC:-in=100:80,out=16:4,prefixes=8,prefix_len=1000}
CAP=${CAP:-}                      # round robin's capacity, when known: skips measuring it
SCORE_CONFIG=${SCORE_CONFIG:-}    # more fields of the score pool's config.json
for b in "$BIN" "$LOAD_BIN"; do
    [ -x "$b" ] || { echo "llm_routing: $b not built (make build)" >&2; exit 1; }
done

bg_workdir llm-routing
# N consecutive free ports (llmsim --base-port gives endpoint i BASE + i).
BASE=$(python3 - "$N" <<'EOF2'
import random, socket, sys
n = int(sys.argv[1])
for _ in range(200):
    base = random.randint(20000, 60000 - n)
    socks = []
    try:
        for i in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", base + i))
            socks.append(s)
        print(base)
        break
    except OSError:
        pass
    finally:
        for s in socks:
            s.close()
EOF2
)
SIM_PID=""

sim_start() {
    python3 "$ROOT/tests/llmsim/llmsim.py" --endpoints "$N" --base-port "$BASE" \
        --speed "$SPEED" --kv-blocks "$KV" >"$WORK/sim.log" 2>&1 &
    SIM_PID=$!
    PIDS="$PIDS $SIM_PID"
    for _ in $(seq 200); do
        grep -q "llmsim: ready" "$WORK/sim.log" && return 0
        sleep 0.1
    done
    echo "llm_routing: llmsim did not start:" >&2
    cat "$WORK/sim.log" >&2
    exit 1
}

sim_stop() {   # TERM, and KILL if it is not gone within 5 s
    kill "$SIM_PID" 2>/dev/null || true
    for _ in $(seq 50); do
        kill -0 "$SIM_PID" 2>/dev/null || break
        sleep 0.1
    done
    kill -9 "$SIM_PID" 2>/dev/null || true
    wait "$SIM_PID" 2>/dev/null || true
}

# The pools: one per policy over the same endpoints (llmsim gives endpoint
# i port BASE + i). Round robin reads no metrics; the others every 200 ms.
mkdir -p "$WORK/models"
urls=$(python3 -c "import json,sys; print(json.dumps(['http://127.0.0.1:%d' % ($BASE + i) for i in range($N)]))")
for pol in round_robin score least_inflight; do
    mkdir -p "$WORK/models/$pol"
    interval=200
    [ "$pol" = round_robin ] && interval=0
    extra=""
    [ "$pol" = score ] && [ -n "$SCORE_CONFIG" ] && extra=", $SCORE_CONFIG"
    printf '{"backend": "openai", "served_model_name": "llmsim", "endpoints": %s, "picker": {"policy": "%s"}, "metrics_interval_ms": %d, "timeout_ms": 120000%s}\n' \
        "$urls" "$pol" "$interval" "$extra" >"$WORK/models/$pol/config.json"
done

sim_start   # the pools' endpoints must resolve and answer when they load
"$BIN" --models "$WORK/models" --listen 127.0.0.1:0 --io-threads 1 >"$WORK/bg.log" 2>&1 &
PIDS="$PIDS $!"
port=$(bg_wait_port "$WORK/bg.log" llm_routing)

# run POLICY MODE VALUE: one step (MODE rate or concurrency); its JSON in
# $WORK/POLICY-VALUE.json.
run() {
    sim_stop
    sim_start
    sleep 1.5   # the score pool's scrapes see the fresh endpoints
    "$LOAD_BIN" --url "http://127.0.0.1:$port" --openai chat --model "$1" --synthetic "$SYN" \
        --"$2" "$3" --duration "$DUR" --warmup "$WARM" --seed 7 --json "$WORK/$1-$3.json" \
        >"$WORK/$1-$3.txt" 2>&1 || { cat "$WORK/$1-$3.txt" >&2; exit 1; }
}

# cached: the share of prompt tokens the endpoints found in their prefix
# caches over the run just ended (llmsim's vLLM counters, summed).
cached() {
    python3 - "$BASE" "$N" <<'EOF2'
import sys, urllib.request
base, n = int(sys.argv[1]), int(sys.argv[2])
tot = hit = 0.0
for i in range(n):
    for line in urllib.request.urlopen("http://127.0.0.1:%d/metrics" % (base + i), timeout=5).read().decode().splitlines():
        if line.startswith("vllm:prompt_tokens_total"):
            tot += float(line.split()[-1])
        elif line.startswith("vllm:prefix_cache_hits_total"):
            hit += float(line.split()[-1])
print("%.0f%%" % (100 * hit / tot if tot else 0))
EOF2
}

field() { # FILE EXPR: a value of the step's JSON
    python3 -c "import json,sys; s=json.load(open(sys.argv[1]))['steps'][0]; print($2)" "$1"
}

cap=${CAP:-0}
[ -n "$CAP" ] && CONC=""
for k in $CONC; do
    run round_robin concurrency "$((k * N))"
    t=$(field "$WORK/round_robin-$((k * N)).json" "round(s['throughput'], 1)")
    echo "llm_routing: round robin, $((k * N)) outstanding: $t req/s"
    cap=$(python3 -c "print(max($cap, $t))")
done
rate=$(python3 -c "print(round($LOAD * $cap, 1))")
echo "llm_routing: $N endpoints, llmsim --speed $SPEED --kv-blocks $KV, workload $SYN"
echo "llm_routing: round robin sustains $cap req/s; runs at $LOAD x = $rate req/s, $DUR s each after $WARM s of warm-up"
printf '%-15s %8s %10s %10s %10s %10s %10s %12s %8s %8s\n' policy rate 'req/s' 'ttft p50' 'ttft p90' 'ttft p99' 'tpot p50' 'out tok/s' errors cached
for pol in $POLICIES; do
    run "$pol" rate "$rate"
    f="$WORK/$pol-$rate.json"
    printf '%-15s %8s %10s %10s %10s %10s %10s %12s %8s %8s\n' "$pol" "$rate" \
        "$(field "$f" "round(s['throughput'], 1)")" \
        "$(field "$f" "round(s['llm']['ttft_ms']['p50'], 1)")" \
        "$(field "$f" "round(s['llm']['ttft_ms']['p90'], 1)")" \
        "$(field "$f" "round(s['llm']['ttft_ms']['p99'], 1)")" \
        "$(field "$f" "round(s['llm']['tpot_ms']['p50'], 1)")" \
        "$(field "$f" "round(s['llm']['output_tokens_per_s'], 1)")" \
        "$(field "$f" "s['errors']")" "$(cached)"
done
if [ -f "$WORK/score-$rate.json" ] && [ -f "$WORK/round_robin-$rate.json" ]; then
    python3 - "$WORK/score-$rate.json" "$WORK/round_robin-$rate.json" <<'EOF'
import json, sys
s, r = (json.load(open(p))["steps"][0] for p in sys.argv[1:3])
print("score / round robin: ttft p99 %.2fx, ttft p50 %.2fx, throughput %.3fx, output tokens/s %.3fx"
      % (s["llm"]["ttft_ms"]["p99"] / r["llm"]["ttft_ms"]["p99"],
         s["llm"]["ttft_ms"]["p50"] / r["llm"]["ttft_ms"]["p50"],
         s["throughput"] / r["throughput"],
         s["llm"]["output_tokens_per_s"] / r["llm"]["output_tokens_per_s"]))
EOF
fi
