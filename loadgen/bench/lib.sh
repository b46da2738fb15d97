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
