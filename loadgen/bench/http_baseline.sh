#!/bin/sh
# http_baseline.sh - batchgate's HTTP front end against nginx, side by side.
#
# Both serve GET /v2/health/live with the same 13-byte JSON body from ONE
# thread / ONE worker on loopback; wrk (one thread) drives each in turn, in
# alternating rounds so drift on a shared machine hits both alike. When the
# machine has >= 2 cores the server is pinned to one core and wrk to another.
#
#   loadgen/bench/http_baseline.sh            # 3 rounds x 10 s, 64 connections
#   DURATION=5 ROUNDS=5 CONNS=128 loadgen/bench/http_baseline.sh
#
# Prints one line per run and a summary: median throughput and its ratio
# batchgate / nginx, and the server CPU time spent per request (from
# /proc/PID/stat around each run) with its ratio. When wrk itself saturates
# its core both servers show the same throughput; the CPU per request still
# tells which server does the work more cheaply. Needs wrk and nginx (scripts/install-deps bench).
set -eu

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
. "$ROOT/loadgen/bench/lib.sh"
BIN=${BATCHGATE_BIN:-$ROOT/build/batchgate}
DURATION=${DURATION:-10}
ROUNDS=${ROUNDS:-3}
CONNS=${CONNS:-64}
BODY='{"live":true}'

for tool in wrk nginx; do
    command -v "$tool" >/dev/null 2>&1 || [ -x "/usr/sbin/$tool" ] || {
        echo "http_baseline: $tool not found; run scripts/install-deps bench" >&2; exit 1; }
done
NGINX=$(command -v nginx || echo /usr/sbin/nginx)
[ -x "$BIN" ] || { echo "http_baseline: $BIN not built; run make" >&2; exit 1; }

bg_workdir bench
bg_pin_cpus

NG_PORT=$(free_port)
mkdir -p "$WORK/nginx/logs"
cat > "$WORK/nginx/nginx.conf" <<NGINX
worker_processes 1;
daemon off;
pid $WORK/nginx/nginx.pid;
error_log $WORK/nginx/logs/error.log warn;
events { worker_connections 4096; }
http {
    access_log off;
    keepalive_requests 100000000;
    keepalive_timeout 60s;
    client_body_temp_path $WORK/nginx/body;
    server {
        listen 127.0.0.1:$NG_PORT;
        location / {
            default_type application/json;
            return 200 '$BODY';
        }
    }
}
NGINX
$SERVER_CPU "$NGINX" -p "$WORK/nginx" -c "$WORK/nginx/nginx.conf" -e "$WORK/nginx/logs/error.log" &
NG_PID=$!
PIDS="$PIDS $NG_PID"

$SERVER_CPU "$BIN" --listen 127.0.0.1:0 --io-threads 1 2>"$WORK/bg.log" &
BG_PID=$!
PIDS="$PIDS $BG_PID"
BG_PORT=$(bg_wait_port "$WORK/bg.log" http_baseline)

check() {
    got=$(curl -s "http://127.0.0.1:$1/v2/health/live")
    [ "$got" = "$BODY" ] || { echo "http_baseline: $2 answered '$got'" >&2; exit 1; }
}
check "$NG_PORT" nginx
check "$BG_PORT" batchgate

cpu_ticks() {   # pid -> utime+stime of the process and its children threads, in ticks
    awk '{print $14 + $15}' "/proc/$1/stat"
}

# The nginx worker is the child of the master; its CPU is what serves.
ng_worker() { pgrep -P "$NG_PID" | head -1; }

run_wrk() {   # port pid -> "requests/s server-cpu-us-per-request"
    before=$(cpu_ticks "$2")
    rps=$($CLIENT_CPU wrk -t1 -c"$CONNS" -d"${DURATION}s" "http://127.0.0.1:$1/v2/health/live" \
        | wrk_rps)
    after=$(cpu_ticks "$2")
    python3 -c "import os,sys; r=float('$rps'); t=($after-$before)/os.sysconf('SC_CLK_TCK'); print(f'{r:.0f} {t*1e6/(r*$DURATION):.2f}')"
}

echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
echo "wrk -t1 -c$CONNS -d${DURATION}s, $ROUNDS rounds, pinning: ${SERVER_CPU:-none}"
NG_ALL=""; BG_ALL=""; NGC_ALL=""; BGC_ALL=""
i=1
while [ "$i" -le "$ROUNDS" ]; do
    set -- $(run_wrk "$NG_PORT" "$(ng_worker)"); ng=$1; ngc=$2
    set -- $(run_wrk "$BG_PORT" "$BG_PID"); bg=$1; bgc=$2
    echo "round $i: nginx $ng req/s ($ngc us CPU/req), batchgate $bg req/s ($bgc us CPU/req)"
    NG_ALL="$NG_ALL $ng"; BG_ALL="$BG_ALL $bg"; NGC_ALL="$NGC_ALL $ngc"; BGC_ALL="$BGC_ALL $bgc"
    i=$((i + 1))
done
python3 - "$NG_ALL" "$BG_ALL" "$NGC_ALL" "$BGC_ALL" <<'PY'
import statistics, sys
ng, bg, ngc, bgc = ([float(x) for x in a.split()] for a in sys.argv[1:5])
mn, mb = statistics.median(ng), statistics.median(bg)
cn, cb = statistics.median(ngc), statistics.median(bgc)
print(f"median throughput: nginx {mn:.0f} req/s, batchgate {mb:.0f} req/s, "
      f"ratio batchgate/nginx {mb/mn:.2f}")
print(f"median server CPU per request: nginx {cn:.2f} us, batchgate {cb:.2f} us, "
      f"efficiency ratio nginx/batchgate {cn/cb:.2f} (above 1: batchgate uses less CPU)")
PY
