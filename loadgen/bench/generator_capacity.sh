#!/bin/sh
# generator_capacity.sh - can batchgate-load outrun the servers it measures?
#
# The same nginx (1 worker, `return 200`, on loopback) is driven in turn by
# wrk -t1 and by batchgate-load --concurrency, both with CONNS keep-alive
# connections and one thread, in alternating rounds. The ratio of their
# answers per second tells whether batchgate-load's own cost could limit a
# measurement (target: >= 1.0x wrk). With 2 or more cores the server is
# pinned to one core and the generators to another.
#
#   loadgen/bench/generator_capacity.sh        # 3 rounds x 10 s, 64 connections
set -eu
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
. "$ROOT/loadgen/bench/lib.sh"
LOAD=${BATCHGATE_LOAD:-$ROOT/build/batchgate-load}
DURATION=${DURATION:-10}
ROUNDS=${ROUNDS:-3}
CONNS=${CONNS:-64}
NGINX=$(command -v nginx || echo /usr/sbin/nginx)
command -v wrk >/dev/null && [ -x "$NGINX" ] || { echo "generator_capacity: needs wrk and nginx (scripts/install-deps bench)" >&2; exit 1; }
[ -x "$LOAD" ] || { echo "generator_capacity: $LOAD not built" >&2; exit 1; }
bg_workdir gen
PORT=$(free_port)
bg_pin_cpus
mkdir -p "$WORK/logs"
cat > "$WORK/nginx.conf" <<NGINX
worker_processes 1; daemon off; pid $WORK/nginx.pid; error_log $WORK/logs/error.log warn;
events { worker_connections 4096; }
http { access_log off; keepalive_requests 100000000; client_body_temp_path $WORK/body;
  server { listen 127.0.0.1:$PORT; location / { return 200 'ok'; } } }
NGINX
$SERVER_CPU "$NGINX" -p "$WORK" -c "$WORK/nginx.conf" -e "$WORK/logs/error.log" &
PIDS="$PIDS $!"
sleep 0.5
echo "machine: $(nproc) cores; nginx 1 worker; $CONNS connections, ${DURATION}s, one generator thread"
W=""; L=""
i=1
while [ "$i" -le "$ROUNDS" ]; do
    w=$($CLIENT_CPU wrk -t1 -c"$CONNS" -d"${DURATION}s" "http://127.0.0.1:$PORT/" | wrk_rps)
    $CLIENT_CPU "$LOAD" --url "http://127.0.0.1:$PORT/" --concurrency "$CONNS" --duration "$DURATION" \
        --warmup 1 --quiet --json "$WORK/l.json" >/dev/null
    l=$(python3 -c "import json; print(json.load(open('$WORK/l.json'))['steps'][0]['throughput'])")
    echo "round $i: wrk $w answers/s, batchgate-load $l answers/s"
    W="$W $w"; L="$L $l"
    i=$((i + 1))
done
python3 -c "
import statistics
w = statistics.median(map(float, '$W'.split())); l = statistics.median(map(float, '$L'.split()))
print(f'median: wrk {w:.0f}/s, batchgate-load {l:.0f}/s, ratio batchgate-load/wrk {l/w:.2f} (target >= 1.0)')"
