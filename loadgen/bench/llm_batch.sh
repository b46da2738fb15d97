#!/bin/sh
# llm_batch.sh - OpenAI's Batch API on the idle capacity of an LLM pool
# (docs/LLM.md "Batch API"): the same online load through batchgate, side
# by side in one run, without a batch and with a LINES-line batch running
# on the same pool, on simulated vLLM-like servers (tests/llmsim/llmsim.py).
#
#   loadgen/bench/llm_batch.sh                        # 2 endpoints, 4 req/s, 30 s each
#   RATE=6 DURATION=60 MAX_RUNNING=6 loadgen/bench/llm_batch.sh
#   SERVER=llama RATE=0.5 MAX_RUNNING=1 BATCH_OUT=32 ONLINE=in=30:10,out=16:4 \
#       loadgen/bench/llm_batch.sh                    # real llama-server replicas (-np 2)
#
# Per phase: the online calls' TTFT p50/p99 and e2e p99 (batchgate-load
# --openai chat, open loop, Poisson), and each endpoint's busy fraction
# two ways: batchgate's device_busy_seconds_total{device="endpointN"} (time
# with a call of batchgate's in flight there) over the window, and the
# server's own: the share of 100 ms samples of llmsim's /metrics with a
# sequence running, and the mean number running. With the batch, also how
# many of its lines ended in the window. The batch is cancelled at the end.
#
# SERVER=llama runs real llama.cpp llama-server replicas instead
# (scripts/fetch-llm: SmolLM2-135M-Instruct, -np 2 -t 1 under nice 19, as
# tests/llm/llama_probe.py starts them; their busy share is read from
# llamacpp:requests_processing).
#
# Knobs (environment): SERVER (llmsim or llama), ENDPOINTS (2), SPEED (llmsim --speed, 1), RATE
# (online requests/s, 4), DURATION (s a phase, 30), LINES (1000), BATCH_OUT
# (max_tokens of a batch line, 64), MAX_RUNNING (the pool's
# offline.max_running and max_inflight_per_endpoint, 4), PREEMPT (the pool's
# offline.preempt, false), ONLINE (the
# online requests' --synthetic, in=60:20,out=32:8), LLAMA_ARGS (more
# llama-server flags, e.g. "-b 16 -ub 16": the prompt tokens it computes
# between two looks at its queue, llama.cpp's chunked prefill).
set -eu

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
. "$ROOT/loadgen/bench/lib.sh"
BIN=${BATCHGATE_BIN:-$ROOT/build/batchgate}
LOAD=$(dirname "$BIN")/batchgate-load
ENDPOINTS=${ENDPOINTS:-2}
SPEED=${SPEED:-1}
RATE=${RATE:-4}
DURATION=${DURATION:-30}
LINES=${LINES:-1000}
BATCH_OUT=${BATCH_OUT:-64}
MAX_RUNNING=${MAX_RUNNING:-4}
ONLINE=${ONLINE:-in=60:20,out=32:8}
SERVER=${SERVER:-llmsim}
PREEMPT=${PREEMPT:-false}
LLAMA_ARGS=${LLAMA_ARGS:-}

[ -x "$BIN" ] && [ -x "$LOAD" ] || { echo "llm_batch: build first ($BIN, $LOAD)" >&2; exit 1; }
bg_workdir llm-batch

if [ "$SERVER" = llama ]; then
    out=$("$ROOT/scripts/fetch-llm")
    LLAMA=$(printf '%s\n' "$out" | sed -n 1p)
    GGUF=$(printf '%s\n' "$out" | sed -n 2p)
    SERVED=smollm2
    PORTS=""
    i=0
    while [ "$i" -lt "$ENDPOINTS" ]; do
        p=$(free_port)
        # shellcheck disable=SC2086 # LLAMA_ARGS: more words of the command line
        nice -n 19 "$LLAMA" -m "$GGUF" --host 127.0.0.1 --port "$p" --metrics -np 2 -t 1 -tb 1 \
            -c 4096 --cache-ram 0 --alias smollm2 $LLAMA_ARGS >"$WORK/llama$i.log" 2>&1 &
        PIDS="$PIDS $!"
        PORTS="$PORTS $p"
        i=$((i + 1))
    done
    for p in $PORTS; do
        for _ in $(seq 600); do curl -sf "http://127.0.0.1:$p/health" >/dev/null && break; sleep 0.1; done
        curl -sf "http://127.0.0.1:$p/health" >/dev/null || { echo "llm_batch: llama-server on $p did not start" >&2; exit 1; }
    done
else
    SERVED=llmsim
    python3 "$ROOT/tests/llmsim/llmsim.py" --endpoints "$ENDPOINTS" --speed "$SPEED" \
        >"$WORK/sim.log" 2>&1 &
    PIDS="$PIDS $!"
    for _ in $(seq 200); do grep -q "llmsim: ready" "$WORK/sim.log" && break; sleep 0.1; done
    grep -q "llmsim: ready" "$WORK/sim.log" || { echo "llm_batch: llmsim did not start" >&2; cat "$WORK/sim.log" >&2; exit 1; }
    PORTS=$(sed -n 's/.*endpoint [0-9]* on 127\.0\.0\.1:\([0-9]*\).*/\1/p' "$WORK/sim.log" | tr '\n' ' ')
fi

mkdir -p "$WORK/repo/smol"
python3 - "$PORTS" "$MAX_RUNNING" "$SERVED" "$PREEMPT" >"$WORK/repo/smol/config.json" <<'PY'
import json, sys
ports, m = sys.argv[1].split(), int(sys.argv[2])
preempt = sys.argv[4] == "true"
print(json.dumps({"backend": "openai", "served_model_name": sys.argv[3],
                  "endpoints": ["http://127.0.0.1:%s" % p for p in ports],
                  "metrics_interval_ms": 50,
                  "offline": {"max_running": m, "max_inflight_per_endpoint": m,
                              "preempt": preempt}}))
PY
cat >"$WORK/config.json" <<EOF
{"listen": "127.0.0.1:0", "model_repository": "$WORK/repo", "state_dir": "$WORK/state",
 "grpc_listen": "off", "log_level": "warn"}
EOF
"$BIN" --config "$WORK/config.json" --io-threads 1 --log-level info >"$WORK/bg.log" 2>&1 &
PIDS="$PIDS $!"
port=$(bg_wait_port "$WORK/bg.log" llm_batch)
URL=http://127.0.0.1:$port

python3 - "$LINES" "$BATCH_OUT" >"$WORK/batch.jsonl" <<'PY'
import json, sys
n, out = int(sys.argv[1]), int(sys.argv[2])
words = "the quick brown fox jumps over a lazy dog while seven bright stars watch".split()
for i in range(n):
    text = " ".join(words[(i + k) % len(words)] for k in range(12 + i % 8))
    print(json.dumps({"custom_id": "line-%d" % i, "method": "POST", "url": "/v1/chat/completions",
                      "body": {"model": "smol", "max_tokens": out,
                               "messages": [{"role": "user", "content": text}]}}))
PY

# sample OUT: llmsim's running gauge per endpoint every 100 ms and batchgate's
# busy counters at both ends, for DURATION s; one JSON line.
sample() {
    python3 - "$PORTS" "$URL" "$DURATION" >"$1" <<'PY'
import json, sys, time, urllib.request
ports, url, dur = sys.argv[1].split(), sys.argv[2], float(sys.argv[3])
def scrape(u):
    return urllib.request.urlopen(u, timeout=5).read().decode()
def busy():
    out = {}
    for line in scrape(url + "/metrics").splitlines():
        if line.startswith("batchgate_device_busy_seconds_total{") and 'model="smol"' in line:
            dev = line.split('device="')[1].split('"')[0]
            out[dev] = out.get(dev, 0.0) + float(line.split()[-1])   # both classes
    return out
b0, t0 = busy(), time.monotonic()
runs = [[] for _ in ports]
while time.monotonic() - t0 < dur:
    for i, p in enumerate(ports):
        for line in scrape("http://127.0.0.1:%s/metrics" % p).splitlines():
            if line.startswith(("vllm:num_requests_running", "llamacpp:requests_processing")):
                runs[i].append(float(line.split()[-1]))
    time.sleep(0.1)
b1, t1 = busy(), time.monotonic()
print(json.dumps({"busy": {d: (b1[d] - b0.get(d, 0)) / (t1 - t0) for d in sorted(b1)},
                  "server_busy": [sum(1 for r in rs if r > 0) / max(1, len(rs)) for rs in runs],
                  "server_running": [sum(rs) / max(1, len(rs)) for rs in runs]}))
PY
}

# phase NAME: the online load and the sampler over the same window.
phase() {
    sample "$WORK/$1.sample" &
    spid=$!
    "$LOAD" --url "$URL" --openai chat --model smol --synthetic "$ONLINE" --rate "$RATE" \
        --duration "$DURATION" --warmup 0 --seed 7 --json "$WORK/$1.json" >"$WORK/$1.out" 2>&1
    wait "$spid"
}

batch_counts() {
    curl -s "$URL/v1/batches/$BID" | python3 -c 'import json,sys; b=json.load(sys.stdin); c=b["request_counts"]; print(b["status"], c["completed"] + c["failed"], c["total"])'
}

echo "== $SERVER: $ENDPOINTS endpoints (llmsim --speed $SPEED); online: --rate $RATE --synthetic $ONLINE, $DURATION s a phase; batch: $LINES lines, max_tokens $BATCH_OUT, offline.max_running $MAX_RUNNING, preempt $PREEMPT"
phase alone
FID=$(curl -s -F purpose=batch -F "file=@$WORK/batch.jsonl" "$URL/v1/files" |
      python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])')
BID=$(curl -s -H 'Content-Type: application/json' "$URL/v1/batches" \
      -d "{\"input_file_id\": \"$FID\", \"endpoint\": \"/v1/chat/completions\", \"completion_window\": \"24h\"}" |
      python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])')
sleep 2   # the batch fills the idle capacity
set -- $(batch_counts)
before=$2
phase batch
set -- $(batch_counts)
after=$2
status=$1
curl -s -X POST "$URL/v1/batches/$BID/cancel" >/dev/null

python3 - "$WORK/alone.json" "$WORK/alone.sample" "$WORK/batch.json" "$WORK/batch.sample" \
    "$before" "$after" "$LINES" "$status" "$DURATION" <<'PY'
import json, sys
a, asamp, b, bsamp = (json.load(open(p)) if p.endswith(".json") else json.loads(open(p).read())
                      for p in sys.argv[1:5])
before, after, lines, status, dur = int(sys.argv[5]), int(sys.argv[6]), int(sys.argv[7]), sys.argv[8], float(sys.argv[9])
def row(name, run, s):
    st = run["steps"][0]
    l = st["llm"]
    print("%-14s %7d %6d %9.1f %9.1f %9.1f   %-14s %-14s %-14s" % (
        name, l["requests"], st.get("errors", 0), l["ttft_ms"]["p50"], l["ttft_ms"]["p99"],
        l["e2e_ms"]["p99"],
        " ".join("%.3f" % v for v in s["busy"].values()),
        " ".join("%.3f" % v for v in s["server_busy"]),
        " ".join("%.2f" % v for v in s["server_running"])))
    return l
print("%-14s %7s %6s %9s %9s %9s   %-14s %-14s %-14s" % (
    "phase", "online", "errors", "ttft p50", "ttft p99", "e2e p99", "busy (bg)",
    "busy (server)", "running (mean)"))
la = row("without batch", a, asamp)
lb = row("with batch", b, bsamp)
print("batch: %d lines ended in the %.0f s window (%.1f/s), %d of %d by its end (%s); cancelled after"
      % (after - before, dur, (after - before) / dur, after, lines, status))
print("online TTFT p99 with / without the batch: %.3f; p50: %.3f"
      % (lb["ttft_ms"]["p99"] / la["ttft_ms"]["p99"], lb["ttft_ms"]["p50"] / la["ttft_ms"]["p50"]))
PY
