#!/bin/sh
# proxy_passthrough.sh - batchgate's plain reverse proxy against nginx
# proxy_pass, in front of the same fast upstream (nginx answering a 2 KiB
# static body from memory).
#
# Both proxies get one worker (nginx: worker_processes 1, keep-alive
# upstream connections; batchgate: io_threads 1). batchgate serves two
# routes to the same upstream: /p/ as configured by default, and /q/ with
# "pipeline": 8 (GETs that reach it together share an upstream connection
# and one send; docs/PROXY.md). The same closed-loop clients
# (batchgate-load --concurrency CONNS, GET) go through each in turn, ROUNDS
# times alternating, so drift in a shared machine hits all alike. Prints
# req/s, p99 and CPU milliseconds per 1000 requests of each proxy and of
# the upstream, and the ratios batchgate / nginx (target >= 1.2x).
#
#   loadgen/bench/proxy_passthrough.sh        # 10 s per run, 64 clients, 2 rounds
set -eu
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
. "$ROOT/loadgen/bench/lib.sh"
BIN=${BATCHGATE_BIN:-$ROOT/build/batchgate}
LOAD=${BATCHGATE_LOAD:-$ROOT/build/batchgate-load}
DURATION=${DURATION:-10}
CONNS=${CONNS:-64}
ROUNDS=${ROUNDS:-2}
NGINX=$(command -v nginx || echo /usr/sbin/nginx)
[ -x "$NGINX" ] || { echo "proxy_passthrough: needs nginx (scripts/install-deps bench)" >&2; exit 1; }
bg_workdir pxb

UP=$(free_port)
NG=$(free_port)
BODY=$(python3 -c 'print("x" * 2048)')
mkdir -p "$WORK/up/logs" "$WORK/ng/logs"
cat > "$WORK/up/nginx.conf" <<NGINX
worker_processes 1; master_process off; daemon off; pid $WORK/up/nginx.pid; error_log $WORK/up/logs/error.log warn;
events { worker_connections 4096; }
http { access_log off; keepalive_requests 1000000;
  server { listen 127.0.0.1:$UP; location / { default_type text/plain; return 200 "$BODY"; } } }
NGINX
cat > "$WORK/ng/nginx.conf" <<NGINX
worker_processes 1; master_process off; daemon off; pid $WORK/ng/nginx.pid; error_log $WORK/ng/logs/error.log warn;
events { worker_connections 4096; }
http { access_log off; keepalive_requests 1000000; client_body_temp_path $WORK/ng/body;
  proxy_temp_path $WORK/ng/proxy;
  upstream fast { server 127.0.0.1:$UP; keepalive 64; keepalive_requests 1000000; }
  server { listen 127.0.0.1:$NG;
    location /p/ { proxy_pass http://fast; proxy_http_version 1.1; proxy_set_header Connection "";
                   proxy_set_header X-Forwarded-For \$proxy_add_x_forwarded_for; } } }
NGINX
"$NGINX" -p "$WORK/up" -c "$WORK/up/nginx.conf" -e "$WORK/up/logs/error.log" &
UPPID=$!
PIDS="$PIDS $UPPID"
"$NGINX" -p "$WORK/ng" -c "$WORK/ng/nginx.conf" -e "$WORK/ng/logs/error.log" &
NGPID=$!
PIDS="$PIDS $NGPID"

mkdir -p "$WORK/models"
cat > "$WORK/bg.json" <<JSON
{"listen": "127.0.0.1:0", "model_repository": "$WORK/models", "io_threads": 1,
 "proxy": {"routes": [{"prefix": "/p/", "urls": ["http://127.0.0.1:$UP"]},
                      {"prefix": "/q/", "urls": ["http://127.0.0.1:$UP"], "pipeline": 8}]}}
JSON
"$BIN" --config "$WORK/bg.json" 2>"$WORK/bg.log" &
BGPID=$!
PIDS="$PIDS $BGPID"
BG=$(bg_wait_port "$WORK/bg.log" proxy_passthrough)
sleep 0.3
curl -sf "http://127.0.0.1:$NG/p/x" >/dev/null || { echo "proxy_passthrough: nginx proxy not answering" >&2; exit 1; }
for r in p q; do
    curl -sf "http://127.0.0.1:$BG/$r/x" >/dev/null || { echo "proxy_passthrough: batchgate proxy not answering on /$r/" >&2; exit 1; }
done

cpu() { awk '{print $14 + $15}' "/proc/$1/stat"; }   # utime + stime, clock ticks
echo "machine: $(nproc) cores; upstream: nginx, 2 KiB static answer; batchgate-load --concurrency $CONNS GET, ${DURATION}s x $ROUNDS rounds each" >&2
run() {   # name port path pid -> prints a line, echoes "throughput p99_ms cpu_ms_per_1000"
    c0=$(cpu "$4") u0=$(cpu "$UPPID")
    "$LOAD" --url "http://127.0.0.1:$2$3" --concurrency "$CONNS" --duration "$DURATION" \
        --warmup 1 --quiet --json "$WORK/run.json" >/dev/null
    c1=$(cpu "$4") u1=$(cpu "$UPPID")
    python3 - "$WORK/run.json" "$1" "$c0" "$c1" "$u0" "$u1" "$(getconf CLK_TCK)" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))["steps"][0]
bad = sum(v for k, v in s["codes"].items() if not k.startswith("2")) + s["errors"]
# The CPU counters also ran through the 1 s warmup.
total = s["throughput"] * (s.get("span_s", s["duration_s"]) + 1)
per_k = lambda a, b: (float(b) - float(a)) / float(sys.argv[7]) * 1e6 / total if total else 0
px, up = per_k(sys.argv[3], sys.argv[4]), per_k(sys.argv[5], sys.argv[6])
print(f'{sys.argv[2]:<26} {s["throughput"]:9.0f} req/s   p50 {s["latency_us"]["p50"]/1e3:5.2f} ms   '
      f'p99 {s["latency_us"]["p99"]/1e3:5.2f} ms   CPU ms/1000 req: proxy {px:5.1f}, '
      f'upstream {up:4.1f}   failed {bad}', file=sys.stderr)
print(s["throughput"], s["latency_us"]["p99"] / 1e3, px)
PY
}
for r in $(seq "$ROUNDS"); do
    echo "nginx $(run "nginx proxy_pass" "$NG" /p/x "$NGPID")" >>"$WORK/results"
    echo "batchgate $(run "batchgate proxy" "$BG" /p/x "$BGPID")" >>"$WORK/results"
    echo "pipelined $(run "batchgate proxy, pipeline 8" "$BG" /q/x "$BGPID")" >>"$WORK/results"
done
python3 - "$WORK/results" "$ROUNDS" <<'PY'
import sys
rows = [l.split() for l in open(sys.argv[1])]
mean = lambda who, k: sum(float(r[k]) for r in rows if r[0] == who) / sum(r[0] == who for r in rows)
for who, what in (("batchgate", "batchgate / nginx"), ("pipelined", "batchgate pipeline 8 / nginx")):
    t, p, c = (mean(who, k) / mean("nginx", k) for k in (1, 2, 3))
    print(f"ratio {what} (mean of {sys.argv[2]} rounds): throughput {t:.2f}x, p99 {p:.2f}x, "
          f"proxy CPU per request {c:.2f}x (target >= 1.2x throughput)")
PY
