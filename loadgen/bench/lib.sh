# lib.sh - sourced by the benchmark scripts: what each of them would
# otherwise repeat.

# bg_wait_port LOG NAME: waits (up to 10 s) for the batchgate writing LOG to
# be ready, prints the port it listens on; on failure shows the log and exits.
bg_wait_port() {
    for _ in $(seq 100); do
        grep -q "ready in" "$1" && break
        sleep 0.1
    done
    port=$(sed -n 's/.*listening on 127\.0\.0\.1:\([0-9]*\).*/\1/p' "$1")
    if ! grep -q "ready in" "$1" || [ -z "$port" ]; then
        echo "$2: batchgate did not start:" >&2
        cat "$1" >&2
        exit 1
    fi
    echo "$port"
}

# free_port: a loopback port nothing listens on now.
free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# bg_workdir NAME: makes the run's scratch folder ($WORK) and the exit trap
# that stops every process listed in $PIDS (append with PIDS="$PIDS $!")
# and removes the folder.
bg_workdir() {
    WORK=$(mktemp -d "${TMPDIR:-/tmp}/bg-$1.XXXXXX")
    PIDS=""
    # "|| true": under set -e a kill of a process already gone would end
    # the trap before the folder is removed.
    trap 'for p in $PIDS; do kill $p 2>/dev/null || true; done; wait 2>/dev/null; rm -rf "$WORK"' EXIT INT TERM
}

# bg_pin_cpus: with 2 or more cores (and taskset), SERVER_CPU and CLIENT_CPU
# become "taskset -c 1" and "taskset -c 0" (prefixes for the command lines
# of the server and of the load generator); otherwise both stay empty.
bg_pin_cpus() {
    SERVER_CPU=""; CLIENT_CPU=""
    if [ "$(nproc)" -ge 2 ] && command -v taskset >/dev/null 2>&1; then
        SERVER_CPU="taskset -c 1"; CLIENT_CPU="taskset -c 0"
    fi
}

# wrk_rps: reads wrk's report on stdin, prints its requests per second.
wrk_rps() { awk '/^Requests\/sec:/ {print $2}'; }

# digits_post_lua FILE: a wrk script POSTing one held-out row of the bundled
# digits model as a KServe v2 JSON infer request.
digits_post_lua() {
    python3 - "$ROOT/models/digits/heldout.json" > "$1" <<'PY'
import json, sys
row = json.load(open(sys.argv[1]))["inputs"][0]
body = json.dumps({"inputs": [{"name": "input", "datatype": "FP32", "shape": [1, 64], "data": row}]})
print('wrk.method = "POST"\nwrk.headers["Content-Type"] = "application/json"\nwrk.body = [[%s]]' % body)
PY
}

# pa_cell CSV: perf_analyzer's report (its -f file) as "infer/s p50_ms p99_ms".
pa_cell() {
    python3 - "$1" <<'PY'
import csv, sys
row = next(csv.DictReader(open(sys.argv[1])))
print("%s %.3f %.3f" % (row["Inferences/Second"], float(row["p50 latency"]) / 1e3,
                        float(row["p99 latency"]) / 1e3))
PY
}

# pa_sweep "MODE ...": ROUNDS rounds of every mode at every concurrency of
# CONC, the modes' order rotated one place each round so that none always
# runs first (on a machine still warm, or still cold); `run MODE C`, the
# caller's, prints "infer/s p50_ms p99_ms". Prints "MODE C infer/s p50 p99"
# lines.
pa_sweep() {
    r=1
    while [ "$r" -le "$ROUNDS" ]; do
        order=$(echo "$1" | awk -v r="$r" '{ for (i = 0; i < NF; i++)
            printf "%s ", $((((i - r + 1) % NF) + NF) % NF + 1) }')
        for c in $CONC; do
            for m in $order; do
                cell=$(run "$m" "$c") || exit 1
                echo "$m $c $cell"
            done
        done
        r=$((r + 1))
    done
}

# pa_table "MODE=Label ..." ["A/B ..."]: pa_sweep's lines on stdin as a
# markdown table of medians over rounds: the first mode's infer/s, each
# other's with its ratio to the first, the extra ratios asked (A/B: mode A's
# infer/s over mode B's), then p50 and p99 of every mode.
pa_table() {
    python3 -c '
import statistics, sys
modes = [m.split("=", 1) for m in sys.argv[1].split()]
extra = [r.split("/") for r in (sys.argv[2].split() if len(sys.argv) > 2 else [])]
label = dict(modes)
cells = {}
for line in sys.stdin:
    f = line.split()
    if len(f) == 5:
        cells.setdefault((f[0], int(f[1])), []).append(tuple(map(float, f[2:])))
med = {k: [statistics.median(x[i] for x in v) for i in range(3)] for k, v in cells.items()}
base = modes[0][0]
head = ["concurrency", label[base] + " infer/s"]
for m, l in modes[1:]:
    head += [l + " infer/s", "%s / %s" % (l, label[base])]
head += ["%s / %s" % (label[a], label[b]) for a, b in extra]
names = " / ".join(l for _, l in modes)
head += ["p50 ms " + names, "p99 ms " + names]
print("| " + " | ".join(head) + " |")
print("| " + " | ".join("---:" for _ in head) + " |")
for c in sorted({k[1] for k in med}):
    v = {m: med[(m, c)] for m, _ in modes}
    row = [str(c), "%.1f" % v[base][0]]
    for m, _ in modes[1:]:
        row += ["%.1f" % v[m][0], "%.2f" % (v[m][0] / v[base][0])]
    row += ["%.2f" % (v[a][0] / v[b][0]) for a, b in extra]
    row += [" / ".join("%.3f" % v[m][1] for m, _ in modes),
            " / ".join("%.3f" % v[m][2] for m, _ in modes)]
    print("| " + " | ".join(row) + " |")
' "$@"
}
