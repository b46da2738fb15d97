#!/bin/sh
# harvest.sh - a job backlog in the device time online traffic leaves
# (issue #15): the same compressed day twice, online only and online plus a
# job backlog, with the issue's four targets. The measurement is
# harvest.py's (its docstring says what each figure is); this is the entry
# point the issue names, with the other scripts' conventions.
#
#   loadgen/bench/harvest.sh                          # synthetic device, 60 s day: ~3 min
#   BACKEND=cpu loadgen/bench/harvest.sh              # an MLP on the CPU backend
#   BACKEND=cuda PERIOD=30 loadgen/bench/harvest.sh   # the same MLP on GPU 0
#   loadgen/bench/harvest.sh --budget-ms 100          # any other flag goes to harvest.py
set -eu

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BATCHGATE_BIN=${BATCHGATE_BIN:-$ROOT/build/batchgate}
BATCHGATE_LOAD=${BATCHGATE_LOAD:-$ROOT/build/batchgate-load}
BACKEND=${BACKEND:-synthetic}
PERIOD=${PERIOD:-60}

[ -x "$BATCHGATE_BIN" ] || { echo "harvest: $BATCHGATE_BIN not built; run make" >&2; exit 1; }
[ -x "$BATCHGATE_LOAD" ] || { echo "harvest: $BATCHGATE_LOAD not built; run make" >&2; exit 1; }
export BATCHGATE_BIN BATCHGATE_LOAD

exec python3 "$ROOT/loadgen/bench/harvest.py" --backend "$BACKEND" --period "$PERIOD" "$@"
