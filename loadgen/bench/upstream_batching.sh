#!/bin/sh
# upstream_batching.sh - batchgate in front of a slow, concurrency-limited
# model server, against going straight to it and against nginx proxy_pass.
#
# The upstream is tests/upstream/fake_upstream.py: 2 ms + 20 us per row per
# call, one call at a time (like a single-GPU server). The same closed-loop
# clients (batchgate-load --concurrency CONNS, single-row KServe v2 requests)
# go (a) straight to it, (b) through nginx proxy_pass (1 worker, keep-alive
# upstream connections), (c) through batchgate (upstream backend, max batch
# 32, 2 in flight). Prints throughput and p99 of each and the ratio c/b.
#
#   loadgen/bench/upstream_batching.sh        # 10 s per run, 64 clients
set -eu
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
. "$ROOT/loadgen/bench/lib.sh"
BIN=${BATCHGATE_BIN:-$ROOT/build/batchgate}
LOAD=${BATCHGATE_LOAD:-$ROOT/build/batchgate-load}
DURATION=${DURATION:-10}
CONNS=${CONNS:-64}
NGINX=$(command -v nginx || echo /usr/sbin/nginx)
[ -x "$NGINX" ] || { echo "upstream_batching: needs nginx (scripts/install-deps bench)" >&2; exit 1; }
bg_workdir upb

python3 "$ROOT/tests/upstream/fake_upstream.py" --base-ms 2 --per-row-ms 0.02 --concurrency 1 >"$WORK/up.log" &
PIDS="$PIDS $!"
for _ in $(seq 50); do grep -q listening "$WORK/up.log" && break; sleep 0.1; done
UP=$(sed -n 's/.*:\([0-9]*\)$/\1/p' "$WORK/up.log")

NG=$(free_port)
mkdir -p "$WORK/logs"
cat > "$WORK/nginx.conf" <<NGINX
worker_processes 1; daemon off; pid $WORK/nginx.pid; error_log $WORK/logs/error.log warn;
events { worker_connections 4096; }
http { access_log off; client_body_temp_path $WORK/body; proxy_temp_path $WORK/proxy;
  upstream model { server 127.0.0.1:$UP; keepalive 64; }
  server { listen 127.0.0.1:$NG;
    location / { proxy_pass http://model; proxy_http_version 1.1; proxy_set_header Connection ""; } } }
NGINX
"$NGINX" -p "$WORK" -c "$WORK/nginx.conf" -e "$WORK/logs/error.log" &
PIDS="$PIDS $!"

mkdir -p "$WORK/models/m"
cat > "$WORK/models/m/config.json" <<JSON
{"backend": "upstream",
 "inputs": [{"name": "x", "datatype": "FP32", "shape": [4]}],
 "outputs": [{"name": "y", "datatype": "FP32", "shape": [3]}],
 "batching": {"max_batch_size": 32, "max_queue_delay_us": 2000},
 "upstream": {"urls": ["http://127.0.0.1:$UP"], "model": "m", "max_inflight": 2, "timeout_ms": 10000}}
JSON
"$BIN" --models "$WORK/models" --listen 127.0.0.1:0 --io-threads 1 2>"$WORK/bg.log" &
PIDS="$PIDS $!"
BG=$(bg_wait_port "$WORK/bg.log" upstream_batching)
sleep 0.3

echo "machine: $(nproc) cores; upstream 2 ms + 20 us/row, 1 call at a time; batchgate-load --concurrency $CONNS, ${DURATION}s"
run() {   # name port -> prints a line, echoes "throughput p99_ms"
    "$LOAD" --url "http://127.0.0.1:$2" --model m --concurrency "$CONNS" --duration "$DURATION" \
        --warmup 1 --quiet --json "$WORK/$1.json" >/dev/null
    python3 - "$WORK/$1.json" "$1" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))["steps"][0]
bad = sum(v for k, v in s["codes"].items() if not k.startswith("2")) + s["errors"]
print(f'{sys.argv[2]:<22} {s["throughput"]:9.0f} req/s   p50 {s["latency_us"]["p50"]/1e3:7.1f} ms   '
      f'p99 {s["latency_us"]["p99"]/1e3:7.1f} ms   failed {bad}', file=sys.stderr)
print(s["throughput"], s["latency_us"]["p99"] / 1e3)
PY
}
set -- $(run "(a) straight" "$UP"); A=$1; AP=$2
set -- $(run "(b) nginx proxy_pass" "$NG"); B=$1; BP=$2
set -- $(run "(c) batchgate" "$BG"); C=$1; CP=$2
python3 -c "print(f'ratio batchgate / nginx: throughput {$C/$B:.1f}x, p99 {$CP/$BP:.2f}x (target >= 10x at no worse p99)')"
