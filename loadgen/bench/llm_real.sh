#!/bin/sh
# llm_real.sh - an LLM pool in front of real llama.cpp llama-server replicas
# serving SmolLM2-135M-Instruct (scripts/fetch-llm), side by side in one run:
#
#   1. routing: the same workload (several long shared prefixes interleaved,
#      mixed lengths, streamed) through a pool picking by load and prefix
#      ("score") and one picking round robin; the replicas' own counters say
#      how many prompt tokens they computed and took from their cache
#      (llamacpp:prompt_tokens_total, prompt_tokens_cached_total), the load
#      generator the time to first token;
#   2. overhead: time to first token through batchgate against the same
#      requests sent to a replica directly, one at a time (low load), in
#      alternating rounds; and batchgate's CPU time per streamed token.
#
#   loadgen/bench/llm_real.sh   [REPLICAS=3 RATE=0.3 DURATION=60 ROUNDS=3 ROUND_S=20 PARTS="routing overhead"
#                                SYNTHETIC=in=20:10,out=8:2,prefixes=6,prefix_len=300]
#
# Replicas run as the tests run them: one thread each, 2 slots, and
# --cache-ram 0, so that "cached" means what a slot still holds (with the
# default host-RAM prompt cache every prefix ends up on every replica after
# its first visits; docs/LLM.md). They are restarted before each routing run
# so both policies start cold.
set -eu
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
. "$HERE/lib.sh"

BIN=${BATCHGATE_BIN:-$ROOT/build/batchgate}
LOAD_BIN=${LOAD_BIN:-$ROOT/build/batchgate-load}
R=${REPLICAS:-3}
RATE=${RATE:-0.3}
DUR=${DURATION:-60}
ROUNDS=${ROUNDS:-3}
ROUND_S=${ROUND_S:-20}
SYN=${SYNTHETIC:-in=20:10,out=8:2,prefixes=6,prefix_len=300}
PARTS=${PARTS:-routing overhead}
paths=$("$ROOT/scripts/fetch-llm" --cached) || {
    echo "llm_real: run scripts/fetch-llm first (builds llama-server, about 10 minutes)" >&2
    exit 1
}
SERVER=$(printf '%s\n' "$paths" | sed -n 1p)
MODEL=$(printf '%s\n' "$paths" | sed -n 2p)

bg_workdir llm-real
REPL_PIDS=""
PORTS=""
for i in $(seq "$R"); do PORTS="$PORTS $(free_port)"; done

replicas_start() {
    REPL_PIDS=""
    for p in $PORTS; do
        "$SERVER" -m "$MODEL" --host 127.0.0.1 --port "$p" --metrics -np 2 -t 1 -tb 1 -c 8192 \
            --cache-ram 0 --alias smollm2 >"$WORK/replica-$p.log" 2>&1 &
        REPL_PIDS="$REPL_PIDS $!"
        PIDS="$PIDS $!"
    done
    for p in $PORTS; do
        for _ in $(seq 300); do
            curl -sf "http://127.0.0.1:$p/health" >/dev/null 2>&1 && break
            sleep 0.1
        done
    done
}

replicas_stop() {
    for pid in $REPL_PIDS; do kill "$pid" 2>/dev/null || true; done
    for pid in $REPL_PIDS; do wait "$pid" 2>/dev/null || true; done
}

# counters: "computed cached" summed over the replicas.
counters() {
    for p in $PORTS; do curl -s "http://127.0.0.1:$p/metrics"; done | awk '
        /^llamacpp:prompt_tokens_total / {c += $2}
        /^llamacpp:prompt_tokens_cached_total / {h += $2}
        END {printf "%d %d\n", c, h}'
}

urls=$(for p in $PORTS; do printf '"http://127.0.0.1:%s",' "$p"; done | sed 's/,$//')
mkdir -p "$WORK/models/score" "$WORK/models/rr"
printf '{"backend": "openai", "served_model_name": "smollm2", "endpoints": [%s], "metrics_interval_ms": 200}\n' \
    "$urls" >"$WORK/models/score/config.json"
printf '{"backend": "openai", "served_model_name": "smollm2", "endpoints": [%s], "metrics_interval_ms": 200, "picker": {"policy": "round_robin"}}\n' \
    "$urls" >"$WORK/models/rr/config.json"

replicas_start
"$BIN" --models "$WORK/models" --listen 127.0.0.1:0 --io-threads 1 >"$WORK/bg.log" 2>&1 &
BG_PID=$!
PIDS="$PIDS $BG_PID"
port=$(bg_wait_port "$WORK/bg.log" llm_real)

field() { python3 -c "import json,sys; s=json.load(open(sys.argv[1]))['steps'][0]; print($2)" "$1"; }

case " $PARTS " in *" routing "*) ;; *) DUR=0 ;; esac
[ "$DUR" = 0 ] || echo "llm_real: $R llama-server replicas (SmolLM2-135M Q4_1, -t 1 -np 2 --cache-ram 0), workload $SYN at $RATE req/s for $DUR s"
[ "$DUR" = 0 ] || printf '%-12s %9s %9s %9s %10s %10s %10s %10s\n' policy answers computed cached 'cached %' 'ttft mean' 'ttft p50' 'ttft p99'
[ "$DUR" = 0 ] || for pol in rr score; do
    replicas_stop
    replicas_start
    sleep 1
    before=$(counters)
    "$LOAD_BIN" --url "http://127.0.0.1:$port" --openai chat --model "$pol" --synthetic "$SYN" \
        --rate "$RATE" --duration "$DUR" --warmup 0 --seed 11 --drain-ms 60000 \
        --json "$WORK/$pol.json" >"$WORK/$pol.txt" 2>&1 || { cat "$WORK/$pol.txt" >&2; exit 1; }
    after=$(counters)
    set -- $before $after
    comp=$(($3 - $1))
    hit=$(($4 - $2))
    echo "$pol $comp $hit" >>"$WORK/tokens"
    f="$WORK/$pol.json"
    printf '%-12s %9s %9s %9s %10s %10s %10s %10s\n' "$pol" "$(field "$f" "s['llm']['requests']")" \
        "$comp" "$hit" "$(python3 -c "print(round(100.0 * $hit / max(1, $comp + $hit), 1))")" \
        "$(field "$f" "round(s['llm']['ttft_ms']['mean'], 1)")" \
        "$(field "$f" "round(s['llm']['ttft_ms']['p50'], 1)")" \
        "$(field "$f" "round(s['llm']['ttft_ms']['p99'], 1)")"
done
[ "$DUR" = 0 ] || python3 - "$WORK/score.json" "$WORK/rr.json" "$WORK/tokens" <<'EOF'
import json, sys
s, r = (json.load(open(p))["steps"][0]["llm"] for p in sys.argv[1:3])
tok = {l.split()[0]: (int(l.split()[1]), int(l.split()[2])) for l in open(sys.argv[3])}
print("score / round robin: prompt tokens computed %.2fx, mean TTFT %.2fx, p99 TTFT %.2fx"
      % (tok["score"][0] / max(1, tok["rr"][0]), s["ttft_ms"]["mean"] / r["ttft_ms"]["mean"],
         s["ttft_ms"]["p99"] / r["ttft_ms"]["p99"]))
EOF

# ---- overhead at low load: one request at a time, direct vs through ----
case " $PARTS " in *" overhead "*) ;; *) exit 0 ;; esac
first=$(echo $PORTS | cut -d' ' -f1)
mkdir -p "$WORK/models1/one"
printf '{"backend": "openai", "served_model_name": "smollm2", "endpoints": ["http://127.0.0.1:%s"], "metrics_interval_ms": 200}\n' \
    "$first" >"$WORK/models1/one/config.json"
"$BIN" --models "$WORK/models1" --listen 127.0.0.1:0 --io-threads 1 >"$WORK/bg1.log" 2>&1 &
BG1=$!
PIDS="$PIDS $BG1"
port1=$(bg_wait_port "$WORK/bg1.log" llm_real)
cpu_of() { awk '{print $14 + $15}' "/proc/$1/stat"; }
tick=$(getconf CLK_TCK)
: >"$WORK/overhead"
for k in $(seq "$ROUNDS"); do
    for via in direct batchgate; do
        if [ "$via" = direct ]; then url="http://127.0.0.1:$first" m=smollm2; else url="http://127.0.0.1:$port1" m=one; fi
        c0=$(cpu_of "$BG1")
        "$LOAD_BIN" --url "$url" --openai chat --model "$m" --synthetic in=60:20,out=32:8 \
            --concurrency 1 --duration "$ROUND_S" --warmup 0 --seed "$k" \
            --json "$WORK/o-$via-$k.json" >"$WORK/o-$via-$k.txt" 2>&1 ||
            { cat "$WORK/o-$via-$k.txt" >&2; exit 1; }
        c1=$(cpu_of "$BG1")
        echo "$via $k $(field "$WORK/o-$via-$k.json" "s['llm']['ttft_ms']['mean'], s['llm']['ttft_ms']['p50'], s['llm']['output_tokens'], s['llm']['requests']" | tr -d '(),') $((c1 - c0))" >>"$WORK/overhead"
    done
done
python3 - "$WORK/overhead" "$tick" <<'EOF'
import sys
rows = [l.split() for l in open(sys.argv[1])]
tick = float(sys.argv[2])
d = [r for r in rows if r[0] == "direct"]
b = [r for r in rows if r[0] == "batchgate"]
mean = lambda rs, i: sum(float(r[i]) for r in rs) / len(rs)
print("overhead, one request at a time, %d alternating rounds:" % len(d))
for r in rows:
    print("  %-9s round %s: TTFT mean %.1f ms, p50 %.1f ms, %s tokens in %s answers"
          % (r[0], r[1], float(r[2]), float(r[3]), r[4], r[5]))
print("TTFT through batchgate / direct: mean %.3fx, p50 %.3fx"
      % (mean(b, 2) / mean(d, 2), mean(b, 3) / mean(d, 3)))
tokens = sum(int(r[4]) for r in b)
cpu = sum(int(r[6]) for r in b) / tick
print("batchgate CPU per streamed token: %.1f us (%.2f s of CPU for %d tokens, %d answers; "
      "the CPU clock ticks every %.0f ms)" % (1e6 * cpu / max(1, tokens), cpu, tokens,
                                             sum(int(r[5]) for r in b), 1000 / tick))
EOF
