#!/bin/sh
# zero_knob.sh - does the default batching policy need tuning? (issue #15)
#
# One small MLP (256 -> 512 -> 512 -> 128, F32, random weights from
# scripts/make_mlp.py, 1 instance) is served by one batchgate in several
# ways that share its weights file:
#   auto   the default: no batching field set but max_batch_size 64
#          (policy "adaptive", max_queue_delay_us left at its default)
#   off    batching off: max_batch_size 1, every request a batch of one.
#          (Not max_queue_delay_us 0: with max_batch_size 64 that still
#          batches whatever queued while the instance was busy, which is
#          close to what the adaptive policy does; max_batch_size 1 is what
#          "no dynamic batching" means in Triton.)
#   dNNN   the fixed delay NNN us, as configured before the adaptive policy
#          (policy "deadline", the former default), for each of DELAYS
#   ctl    the control: a second copy of auto (own worker thread, same
#          config). What it measures against auto and against the best
#          other is what noise alone does to two identical configs in this
#          run; CONTROL=0 leaves it out.
# A closed-loop sweep (batchgate-load --concurrency N, single-row requests)
# goes through LEVELS.
#
# How it is measured, and why. The VM is shared: other sessions' compiles
# come and go within seconds and move one config's windows by 20-50%. So
# the configs run in short windows (WARMUP + DURATION s), interleaved: in
# each round every level runs every config back to back (AB..E AB..E ...),
# the order rotated from round to round, so a drift slower than a few
# seconds hits all configs of a level alike; each round has a server of its
# own (below: a long-lived server keeps a per-thread bias). Per level the
# "best other"
# is the config among off and the delays with the highest median
# throughput over the rounds (the one an operator would have picked); the
# verdict is the MEDIAN OF THE PER-ROUND RATIOS default / best other (each
# ratio within one round, seconds apart), printed with a distribution-free
# ~95% interval of that median and the min-max; the ratio of the medians
# is printed too. A level under 0.90 is reported as a miss beyond the noise
# only when its whole interval is under 0.90.
# Nothing is pinned: the CPU backend's worker, the IO thread and the load
# generator compete for the same two cores as they would in a deployment,
# and that competition is one of the things measured. Per window the
# script also reads, from /proc, the server's CPU time (all its threads,
# schedstat, ns), the time its threads waited for a CPU, its context
# switches, and the CPU the rest of the machine used meanwhile (other
# sessions: /proc/stat busy time less the server's and the load
# generator's), so a level whose ratio moves can be told apart from a
# round that was crowded; the CPU time is also split by thread (the IO
# thread, the model's worker, the batch watchdog) to show where a
# config's CPU per request goes.
#
# Targets (issue #15): at every level the default within 10% of the best
# other in throughput (median ratio >= 0.90), and the default's p50 at
# concurrency 1 within 1.2x of batching off.
#
#   loadgen/bench/zero_knob.sh        # 12 rounds x 7 levels x 6 configs x (0.5+1 s), a fresh server a round: ~13 min
#   ROUNDS=5 DURATION=2 loadgen/bench/zero_knob.sh
#   LEVELS="1 16" DELAYS="250 500" loadgen/bench/zero_knob.sh
set -eu

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
. "$ROOT/loadgen/bench/lib.sh"
BIN=${BATCHGATE_BIN:-$ROOT/build/batchgate}
LOAD=${BATCHGATE_LOAD:-$ROOT/build/batchgate-load}
DURATION=${DURATION:-1}
WARMUP=${WARMUP:-0.5}
ROUNDS=${ROUNDS:-12}
LEVELS=${LEVELS:-1 2 4 8 16 32 64}
# d2000 was never the best fixed delay at any level (2026-12-03 runs) and
# costs a sixth of the time; DELAYS="250 500 1000 2000" brings it back.
DELAYS=${DELAYS:-250 500 1000}
DIMS=${DIMS:-256,512,512,128}
CONTROL=${CONTROL:-1}

[ -x "$BIN" ] || { echo "zero_knob: $BIN not built; run make" >&2; exit 1; }
[ -x "$LOAD" ] || { echo "zero_knob: $LOAD not built; run make" >&2; exit 1; }

bg_workdir zero_knob

python3 "$ROOT/scripts/make_mlp.py" "$WORK/models/auto" --dims "$DIMS" --max-batch 64 >/dev/null
# model folder name, then the batching object it gets
variant() {
    mkdir -p "$WORK/models/$1"
    [ -e "$WORK/models/$1/model.safetensors" ] ||
        ln -s ../auto/model.safetensors "$WORK/models/$1/model.safetensors"
    python3 - "$WORK/models/auto/config.json" "$WORK/models/$1/config.json" "$1" "$2" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
c["name"] = sys.argv[3]
c["batching"] = json.loads(sys.argv[4])
json.dump(c, open(sys.argv[2], "w"), indent=1)
PY
}
variant auto '{"max_batch_size": 64}'
variant off '{"max_batch_size": 1}'
CONFIGS="auto off"
if [ "$CONTROL" = 1 ]; then
    variant ctl '{"max_batch_size": 64}'
    CONFIGS="auto ctl off"
fi
for d in $DELAYS; do
    variant "d$d" "{\"max_batch_size\": 64, \"max_queue_delay_us\": $d, \"policy\": \"deadline\"}"
    CONFIGS="$CONFIGS d$d"
done

echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'); load before: $(cut -d' ' -f1-3 /proc/loadavg); $(date -u '+%Y-%m-%d %H:%M UTC')"
echo "model $DIMS F32, 1 instance, 1 IO thread; batchgate-load --concurrency N --duration $DURATION --warmup $WARMUP, single rows, $ROUNDS rounds, configs interleaved, order rotated and a fresh server each round"
echo "configs: $CONFIGS (ctl: a second copy of auto; off: max_batch_size 1; dNNN: policy deadline, max_queue_delay_us NNN)"
echo "per window: req/s p50 ms, rows per batch, server CPU us/req, server context switches/req; per round: the other sessions' CPU (cores, median of the round's windows)"

# One round against the server on PORT (pid SERVER): every level, every
# config in ORDER; its raw results are appended to $WORK/raw, one window a line.
cat > "$WORK/round.py" <<'PY'
import json, os, statistics, subprocess, sys, time, urllib.request

load, port, server, work, duration, warmup, r, levels, order = sys.argv[1:]
r, levels, order = int(r), [int(x) for x in levels.split()], order.split()
HZ = os.sysconf("SC_CLK_TCK")

GROUPS = (("bg-io-", "io"), ("bg-w-", "worker"), ("bg-watchdog", "watchdog"))

def server_counters():
    """The server's threads summed: on-CPU ns (all, and by thread group), ns
    waiting for a CPU, context switches."""
    cpu = wait = cs = 0
    by = dict.fromkeys([g for _, g in GROUPS] + ["rest"], 0)
    base = f"/proc/{server}/task"
    for tid in os.listdir(base):
        try:
            name = open(f"{base}/{tid}/comm").read().strip()
            run, rq, _ = open(f"{base}/{tid}/schedstat").read().split()
            cpu += int(run)
            wait += int(rq)
            by[next((g for p, g in GROUPS if name.startswith(p)), "rest")] += int(run)
            for line in open(f"{base}/{tid}/status"):
                if "ctxt_switches:" in line:     # voluntary and nonvoluntary
                    cs += int(line.split()[1])
        except (FileNotFoundError, ProcessLookupError, ValueError):
            pass     # a thread that ended meanwhile
    return cpu, wait, cs, by

def machine_busy():
    """Seconds of user + nice + system time on all CPUs since boot, and of steal."""
    f = [int(x) for x in open("/proc/stat").readline().split()[1:]]
    return (f[0] + f[1] + f[2]) / HZ, f[7] / HZ

def answered(model):
    url = f"http://127.0.0.1:{port}/v2/models/{model}/stats"
    return json.load(urllib.request.urlopen(url, timeout=10))["model_stats"][0]["inference_count"]

def window(model, conc):
    n0, s0, m0, t0 = answered(model), server_counters(), machine_busy(), time.monotonic()
    p = subprocess.Popen([load, "--url", f"http://127.0.0.1:{port}", "--model", model,
                          "--concurrency", str(conc), "--duration", duration, "--warmup", warmup,
                          "--quiet", "--json", f"{work}/step.json"], stdout=subprocess.DEVNULL)
    _, status, ru = os.wait4(p.pid, 0)
    n1, s1, m1, wall = answered(model), server_counters(), machine_busy(), time.monotonic() - t0
    if status:
        sys.exit(f"zero_knob: batchgate-load failed on {model} at concurrency {conc}")
    s = json.load(open(f"{work}/step.json"))["steps"][0]
    bad = sum(v for k, v in s["codes"].items() if not k.startswith("2")) + s["errors"]
    if bad:
        print(f"  warning: {model} at concurrency {conc}: {bad} non-2xx answers or errors", file=sys.stderr)
    n = max(n1 - n0, 1)
    srv_cpu = (s1[0] - s0[0]) / 1e9
    others = (m1[0] - m0[0] - srv_cpu - ru.ru_utime - ru.ru_stime) / wall
    return dict(rps=s["throughput"], p50=s["latency_us"]["p50"] / 1e3, p99=s["latency_us"]["p99"] / 1e3,
                rpb=s.get("server", {}).get("rows_per_batch", 0), cpu_us=srv_cpu / n * 1e6,
                wait_us=(s1[1] - s0[1]) / 1e3 / n, cs=(s1[2] - s0[2]) / n,
                **{g + "_us": (s1[3][g] - s0[3][g]) / 1e3 / n for g in s0[3]},
                others=max(others, 0.0), steal=(m1[1] - m0[1]) / wall)

with open(f"{work}/raw", "a") as raw:
    for c in levels:
        line, crowd = f"  round {r} c={c}:", []
        for m in order:
            w = window(m, c)
            raw.write(json.dumps(dict(w, round=r, c=c, m=m)) + "\n")
            raw.flush()
            crowd.append(w["others"])
            line += f" {m} {w['rps']:.0f} {w['p50']:.3f} {w['rpb']:.2f} {w['cpu_us']:.0f} {w['cs']:.1f};"
        print(f"{line} others {statistics.median(crowd):.2f}", flush=True)
PY

# A fresh server each round: a config's worker thread keeps its place (its
# core, the kernel's wake-up history, its buffers' addresses) for the
# server's life, and two identical configs measured 0.81x apart at one
# connection over 20 rounds of one server; a new server per round turns
# that into noise the median over the rounds absorbs. Loading takes ~20 ms.
ORDER=$CONFIGS
r=1
while [ "$r" -le "$ROUNDS" ]; do
    "$BIN" --models "$WORK/models" --listen 127.0.0.1:0 --io-threads 1 2>"$WORK/bg.log" &
    SERVER=$!
    PIDS=$SERVER
    PORT=$(bg_wait_port "$WORK/bg.log" zero_knob)
    python3 "$WORK/round.py" "$LOAD" "$PORT" "$SERVER" "$WORK" "$DURATION" "$WARMUP" "$r" "$LEVELS" "$ORDER"
    kill "$SERVER"
    wait "$SERVER" || true
    PIDS=""
    ORDER="$(echo "$ORDER" | cut -d' ' -f2-) $(echo "$ORDER" | cut -d' ' -f1)"   # rotate
    r=$((r + 1))
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg); $(date -u '+%Y-%m-%d %H:%M UTC')"

python3 - "$WORK/raw" <<'PY'
import json, math, statistics, sys

wins = [json.loads(l) for l in open(sys.argv[1])]
levels = sorted({w["c"] for w in wins})
configs = list(dict.fromkeys(w["m"] for w in wins))
def get(c, m):
    return {w["round"]: w for w in wins if w["c"] == c and w["m"] == m}
def med(c, m, k):
    return statistics.median(w[k] for w in get(c, m).values())
def ratios(c, m, other, k="rps"):
    a, b = get(c, m), get(c, other)
    return sorted(a[r][k] / b[r][k] for r in a if r in b)
def ci(xs):
    """A distribution-free ~95% interval of the median: order statistics k and
    n+1-k, k the largest with P(Binomial(n, 1/2) < k) <= 0.025."""
    n, k, below = len(xs), 0, 0.0
    while k < n and below + math.comb(n, k) / 2 ** n <= 0.025:
        below += math.comb(n, k) / 2 ** n
        k += 1
    return (xs[k - 1], xs[n - k]) if k >= 1 else (xs[0], xs[-1])

print()
print("medians over the rounds: req/s, p50 ms, p99 ms, rows per batch, server CPU us/req, "
      "us/req its threads waited for a CPU, context switches/req")
for c in levels:
    print(f"  c={c} " + "; ".join(
        f"{m} {med(c, m, 'rps'):.0f} {med(c, m, 'p50'):.3f} {med(c, m, 'p99'):.3f} {med(c, m, 'rpb'):.2f} "
        f"{med(c, m, 'cpu_us'):.0f} {med(c, m, 'wait_us'):.0f} {med(c, m, 'cs'):.1f}" for m in configs))
print()
print("server CPU us/req by thread, medians: IO thread / worker / batch watchdog / the rest")
for c in levels:
    print(f"  c={c} " + "; ".join(
        f"{m} {med(c, m, 'io_us'):.0f}/{med(c, m, 'worker_us'):.0f}/{med(c, m, 'watchdog_us'):.1f}/"
        f"{med(c, m, 'rest_us'):.1f}" for m in configs))
others = [w["others"] for w in wins]
print(f"other sessions' CPU during the windows (cores): median {statistics.median(others):.2f}, "
      f"max {max(others):.2f}; steal median {statistics.median(w['steal'] for w in wins):.2f}")
print()
print("best other: off or the fixed delay with the highest median req/s at that level. "
      "default / best other: the ratio within each round; its median over the rounds "
      "[~95% interval of that median] (min-max). ctl: the same for the control")
print()
print("| conc | default req/s, p50/p99 ms | off req/s, p50/p99 ms | best fixed | req/s, p50/p99 ms "
      "| default / best other, per round: median [95% CI] (min–max) | ctl / best other | "
      "ratio of medians | default p50 / off p50 |")
print("| ---: | --- | --- | --- | --- | --- | ---: | ---: | ---: |")
worst, fails, ctl_worst = (9.9, 0), [], (9.9, 0)
for c in levels:
    fixed = max((m for m in configs if m.startswith("d")), key=lambda m: med(c, m, "rps"))
    best = max(("off", fixed), key=lambda m: med(c, m, "rps"))
    rr = ratios(c, "auto", best)
    rm, (lo, hi) = statistics.median(rr), ci(rr)
    ctl = "–"
    if "ctl" in configs:
        cm = statistics.median(ratios(c, "ctl", best))
        ctl_worst = min(ctl_worst, (cm, c))
        ctl = f"{cm:.3f}x"
    of_medians = med(c, "auto", "rps") / med(c, best, "rps")
    p50m = statistics.median(ratios(c, "auto", "off", "p50"))
    worst = min(worst, (rm, c))
    if rm < 0.90:
        fails.append("throughput at c=%d: %.3fx of %s (%s)" % (
            c, rm, best, "beyond the noise: the interval ends below 0.90" if hi < 0.90
            else "within the noise: the interval reaches %.2f" % hi))
    row = lambda m: f"{med(c, m, 'rps'):.0f}, {med(c, m, 'p50'):.2f}/{med(c, m, 'p99'):.2f}"
    print(f"| {c} | {row('auto')} | {row('off')} | {fixed[1:]} us | {row(fixed)} | "
          f"{rm:.3f}x of {best} [{lo:.2f}–{hi:.2f}] ({rr[0]:.2f}–{rr[-1]:.2f}) | {ctl} | "
          f"{of_medians:.3f}x | {p50m:.2f}x |")
first = levels[0]
p50s = ratios(first, "auto", "off", "p50")
p50, (plo, phi) = statistics.median(p50s), ci(p50s)
if first == 1 and p50 > 1.2:
    fails.append("p50 at c=1: %.2fx of batching off [%.2f-%.2f]" % (p50, plo, phi))
print()
print("worst median per-round default / best other: %.3fx at c=%d (target >= 0.90)" % worst)
if "ctl" in configs:
    print("the control (a copy of the default) measured, at its worst level: %.3fx at c=%d" % ctl_worst)
print("default p50 / off p50 at c=%d, median of rounds: %.2fx [%.2f-%.2f] (target <= 1.2 at c=1)" % (
    first, p50, plo, phi))
print("targets: " + ("met" if not fails else "NOT met: " + "; ".join(fails)))
PY
