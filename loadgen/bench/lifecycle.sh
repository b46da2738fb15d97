#!/bin/sh
# lifecycle.sh - model lifecycle under a memory budget (issue #17): 20 lazy
# CPU MLPs whose weights are 3x cpu0's memory_budget_bytes, Zipf traffic
# (s = 1.1) from 8 clients for 20 s, side by side with the same traffic and
# no budget: hit ratio, cold starts (server and client), goodput within a
# 2000 ms budget, evictions, resident bytes against the budget. Then the
# first request of an unloaded 100 MB model against reading its file,
# 5 rounds (target <= 1.5x). The measurement is lifecycle.py's (its
# docstring says what each figure is); this is the entry point the issue
# names, with the other scripts' conventions. About 2 minutes.
#
#   loadgen/bench/lifecycle.sh                          # both parts
#   loadgen/bench/lifecycle.sh --parts big --big-mb 200 # any flag goes to lifecycle.py
#   python3 loadgen/bench/lifecycle_selftest.py         # the script's own checks
set -eu

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BATCHGATE_BIN=${BATCHGATE_BIN:-$ROOT/build/batchgate}

[ -x "$BATCHGATE_BIN" ] || { echo "lifecycle: $BATCHGATE_BIN not built; run make" >&2; exit 1; }
export BATCHGATE_BIN

exec python3 "$ROOT/loadgen/bench/lifecycle.py" "$@"
