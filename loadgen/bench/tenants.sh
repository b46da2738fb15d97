#!/bin/sh
# tenants.sh - tenants' shares of device time (issue #16): A (share 0.7) and
# B (0.3) on one model with one instance, on a fresh batchgate per backend:
# the 70/30 split when both saturate, B borrowing the whole device alone, A
# reclaiming its share within a second, A's latency and goodput held while
# B floods at 5x capacity, and a time window PUT during the run moving the
# split to 20/80 with no request lost. The measurement is tenants.py's (its
# docstring says what each figure is); this is the entry point the issue
# names, with the other scripts' conventions. Both backends side by side in
# one invocation: about 3 minutes.
#
#   loadgen/bench/tenants.sh                          # synthetic, then the CPU MLP
#   BACKEND=synthetic loadgen/bench/tenants.sh        # one of them
#   loadgen/bench/tenants.sh --dims 64,2048,2048,16   # any other flag goes to tenants.py
set -eu

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BATCHGATE_BIN=${BATCHGATE_BIN:-$ROOT/build/batchgate}
BATCHGATE_LOAD=${BATCHGATE_LOAD:-$ROOT/build/batchgate-load}
BACKEND=${BACKEND:-both}

[ -x "$BATCHGATE_BIN" ] || { echo "tenants: $BATCHGATE_BIN not built; run make" >&2; exit 1; }
[ -x "$BATCHGATE_LOAD" ] || { echo "tenants: $BATCHGATE_LOAD not built; run make" >&2; exit 1; }
export BATCHGATE_BIN BATCHGATE_LOAD

exec python3 "$ROOT/loadgen/bench/tenants.py" --backend "$BACKEND" "$@"
