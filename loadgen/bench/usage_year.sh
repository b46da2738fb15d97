#!/bin/sh
# usage_year.sh - the usage ledger over a year (docs/USAGE.md, issue #18's
# targets): a generated year of hourly rows for 10 tenants x 20 models on
# 4 devices, every pair active every hour (the worst case for size), the
# last 7 days as minute rows; prints the database's size and how long
# GET /v2/usage takes over the whole year (median and max of 5 calls each,
# curl's total time on loopback) for a few shapes of question.
#
#   loadgen/bench/usage_year.sh [BUILD_DIR]      # default: build
#   TENANTS=10 MODELS=20 DAYS=365 loadgen/bench/usage_year.sh build-nc
set -eu
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
. "$ROOT/loadgen/bench/lib.sh"
BUILD=$(realpath "${1:-$ROOT/build}")
TENANTS=${TENANTS:-10} MODELS=${MODELS:-20} DAYS=${DAYS:-365}
bg_workdir usage
mkdir "$WORK/models"
t0=$(date +%s.%N)
"$BUILD/usage_history" "$WORK/state" --days "$DAYS" --tenants "$TENANTS" --models "$MODELS" \
    --devices 4 --minute-days 7 >/dev/null
t1=$(date +%s.%N)
size=$(stat -c %s "$WORK/state/batchgate.db")
wal=$(stat -c %s "$WORK/state/batchgate.db-wal" 2>/dev/null || echo 0)
free=$(python3 -c "import sqlite3,sys; c=sqlite3.connect(sys.argv[1]); \
print(c.execute('pragma freelist_count').fetchone()[0]*c.execute('pragma page_size').fetchone()[0])" \
    "$WORK/state/batchgate.db")
hours=$(python3 -c "import sqlite3,sys; c=sqlite3.connect(sys.argv[1]); \
print(c.execute('select count(*) from usage_hour').fetchone()[0], \
c.execute('select count(*) from usage_minute').fetchone()[0], \
c.execute('select count(*) from usage_key').fetchone()[0])" "$WORK/state/batchgate.db")
printf 'generated %s days x %s tenants x %s models in %.1f s\n' "$DAYS" "$TENANTS" "$MODELS" \
    "$(echo "$t1 - $t0" | bc)"
echo "database: $size bytes ($(echo "scale=1; $size / 1048576" | bc) MiB), WAL $wal bytes, free pages $free bytes"
echo "rows: hour blobs, minute rows, keys = $hours"
printf '{"model_repository": "%s", "state_dir": "%s"}\n' "$WORK/models" "$WORK/state" > "$WORK/config.json"
"$BUILD/batchgate" --config "$WORK/config.json" --listen 127.0.0.1:0 --io-threads 1 2>"$WORK/log" &
PIDS="$PIDS $!"
PORT=$(bg_wait_port "$WORK/log" usage_year)
now=$(date +%s)
from=$((now - DAYS * 86400 - 86400))
ask() {   # ask NAME QUERY
    times=""
    for _ in 1 2 3 4 5; do
        t=$(curl -s -o "$WORK/out" -w '%{time_total}' "http://127.0.0.1:$PORT/v2/usage?from=$from&to=$now&$2")
        times="$times $t"
    done
    rows=$(python3 -c "import json,sys; print(len(json.load(open(sys.argv[1]))['rows']))" "$WORK/out")
    echo "$times" | python3 -c "import sys,statistics; t=[float(x)*1000 for x in sys.stdin.read().split()]; \
print('%-44s %6d rows  median %6.1f ms  max %6.1f ms' % (sys.argv[1], int(sys.argv[2]), statistics.median(t), max(t)))" "$1" "$rows"
}
ask "year by tenant, daily" "step=86400&group_by=tenant"
ask "year by tenant and model, monthly" "step=2592000&group_by=tenant,model"
ask "year total, hourly" "step=3600"
ask "year, every key, one period" "step=$((DAYS * 86400 + 86400))&group_by=tenant,model,class,device"
from=$((now - 7 * 86400))
ask "last 7 days by tenant, hourly (minute rows)" "step=3600&group_by=tenant"
