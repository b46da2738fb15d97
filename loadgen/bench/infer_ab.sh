#!/bin/sh
# infer_ab.sh - two batchgate binaries side by side on the same inference
# load: did a change make the request path slower or faster?
#
# Each binary serves the bundled digits model with one IO thread; wrk drives
# single-row KServe v2 JSON requests (-t1 -c32) at one, then the other,
# alternating ROUNDS times so drift in a shared machine hits both alike.
# Prints req/s per round and the ratio of medians B / A.
#
# ROUTE=live drives GET /v2/health/live instead (http_baseline.sh's request,
# the HTTP front end alone) for an A/B of the server without the model path.
#
#   loadgen/bench/infer_ab.sh OLD_BINARY NEW_BINARY     # e.g. a worktree's build
#   ROUTE=live loadgen/bench/infer_ab.sh OLD_BINARY NEW_BINARY
set -eu
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
. "$ROOT/loadgen/bench/lib.sh"
[ $# -eq 2 ] || { echo "usage: infer_ab.sh BINARY_A BINARY_B" >&2; exit 2; }
A=$1 B=$2
DURATION=${DURATION:-8}
CONNS=${CONNS:-32}
ROUNDS=${ROUNDS:-3}
ROUTE=${ROUTE:-infer}
command -v wrk >/dev/null || { echo "infer_ab: wrk not found; run scripts/install-deps bench" >&2; exit 1; }
A=$(realpath "$A") B=$(realpath "$B")
bg_workdir iab
digits_post_lua "$WORK/post.lua"
# Each keeps its state database (jobs, usage ledger) in the scratch folder.
mkdir "$WORK/a" "$WORK/b"
cd "$WORK/a"
"$A" --models "$ROOT/models" --listen 127.0.0.1:0 --grpc-listen off --io-threads 1 2>"$WORK/a.log" &
PIDS="$PIDS $!"
cd "$WORK/b"
"$B" --models "$ROOT/models" --listen 127.0.0.1:0 --grpc-listen off --io-threads 1 2>"$WORK/b.log" &
PIDS="$PIDS $!"
PA=$(bg_wait_port "$WORK/a.log" infer_ab)
PB=$(bg_wait_port "$WORK/b.log" infer_ab)
run() {
    if [ "$ROUTE" = live ]; then
        wrk -t1 -c"$CONNS" -d"${DURATION}s" "http://127.0.0.1:$1/v2/health/live" | wrk_rps
    else
        wrk -t1 -c"$CONNS" -d"${DURATION}s" -s "$WORK/post.lua" \
            "http://127.0.0.1:$1/v2/models/digits/infer" | wrk_rps
    fi
}
echo "machine: $(nproc) cores; route $ROUTE, digits model, wrk -t1 -c$CONNS -d${DURATION}s, 1 IO thread each"
echo "A: $A"
echo "B: $B"
RA=""; RB=""
i=1
while [ "$i" -le "$ROUNDS" ]; do
    a=$(run "$PA"); b=$(run "$PB")
    echo "round $i: A $a req/s, B $b req/s"
    RA="$RA $a"; RB="$RB $b"
    i=$((i + 1))
done
python3 -c "
import statistics
a = statistics.median(map(float, '$RA'.split())); b = statistics.median(map(float, '$RB'.split()))
print(f'median: A {a:.0f} req/s, B {b:.0f} req/s, ratio B/A {b/a:.3f}')"
