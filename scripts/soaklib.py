"""soaklib.py - what scripts/soak and scripts/soak-llm share: starting the
batchgate under test, sampling its memory and file descriptors from /proc
and GET /debug/memory, and the flatness rule both judge by (the median of
the first minute after the warmup against the median of the last minute).
Standard library only, so that either script runs with any python3.
"""

import json
import os
import signal
import socket
import subprocess
import time


def rss_kib(pid):
    """VmRSS, and its anonymous (heap, stacks) and file-backed (code pages
    touched so far) parts, KiB."""
    out = {}
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            for key in ("VmRSS", "RssAnon", "RssFile"):
                if line.startswith(key + ":"):
                    out[key] = int(line.split()[1])
    return out.get("VmRSS", 0), out.get("RssAnon", 0), out.get("RssFile", 0)


def nfds(pid):
    return len(os.listdir("/proc/%d/fd" % pid))


def nsockets(pid):
    """Sockets the process holds open (0 once it is gone)."""
    n = 0
    try:
        for fd in os.listdir("/proc/%d/fd" % pid):
            try:
                n += os.readlink("/proc/%d/fd/%s" % (pid, fd)).startswith("socket:")
            except OSError:
                pass
    except OSError:
        pass
    return n


def read_response(s, timeout=5.0):
    """One answer: the head, then Content-Length bytes (or up to the close)."""
    s.settimeout(timeout)
    data = b""
    try:
        while b"\r\n\r\n" not in data:
            chunk = s.recv(65536)
            if not chunk:
                return data
            data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        length = None
        for line in head.split(b"\r\n")[1:]:
            k, _, v = line.partition(b":")
            if k.strip().lower() == b"content-length":
                length = int(v.strip())
        while length is None or len(body) < length:
            chunk = s.recv(65536)
            if not chunk:
                break
            body += chunk
    except (OSError, ValueError):
        pass
    return data


def memory(port):
    """GET /debug/memory: heap in use, and each malloc arena's size."""
    try:
        s = socket.create_connection(("127.0.0.1", port), timeout=5)
        s.sendall(b"GET /debug/memory HTTP/1.1\r\nHost: soak\r\nConnection: close\r\n\r\n")
        data = read_response(s)
        s.close()
        return json.loads(data.partition(b"\r\n\r\n")[2])
    except (OSError, ValueError):
        return {}


def start_batchgate(binary, cfg, log, env=None):
    """Starts batchgate on the config file `cfg`, its stderr into the open
    file `log` (with `env` added to the environment: heaptrack_env's);
    waits up to 10 s for "ready in" (every model loaded or refused).
    Returns (process, HTTP port or None, the log so far)."""
    srv = subprocess.Popen([binary, "--config", cfg], stderr=log, stdout=subprocess.DEVNULL,
                           env=dict(os.environ, **env) if env else None)
    text = ""
    for _ in range(100):
        time.sleep(0.1)
        log.seek(0)
        text = log.read()
        if "ready in" in text:
            return srv, int(text.split("listening on 127.0.0.1:")[1].split()[0]), text
    return srv, None, text


def sample(t, pid, port, clients=()):
    """One sample of the server: RSS and its parts, fds, the sockets the load
    generators' processes `clients` hold, and the allocator's view."""
    mem = memory(port)
    rss, anon, filed = rss_kib(pid)
    return {"t": round(t, 1), "rss_kib": rss, "anon_kib": anon, "file_kib": filed,
            "fds": nfds(pid),
            # A load generator's pool grows to its peak concurrency and keeps
            # those connections: the server's own fds are what it holds
            # beyond them.
            "load_conns": sum(nsockets(c) for c in clients),
            "heap_kib": mem.get("heap_in_use_bytes", -1024) // 1024,
            # SQLite's share of the heap, and of it the state database's page
            # caches (bounded by cache_size): a cache filling up is not a leak.
            "sqlite_kib": mem.get("sqlite_bytes", -1024) // 1024,
            "sqlite_cache_kib": mem.get("sqlite_cache_bytes", -1024) // 1024,
            "mmapped_chunks": mem.get("mmapped_chunks", -1),
            "arena_kib": [b // 1024 for b in mem.get("arena_bytes", [])]}


def table_head(extra=""):
    """The sample table's header; `extra`, a script's own columns, goes
    before the arenas (the last column, of varying width)."""
    return ("%8s %10s %10s %10s %12s %8s %6s %6s %8s" % ("t (s)", "RSS (KiB)", "anon", "file",
                                                        "heap (KiB)", "sqlite", "fds", "load",
                                                        "mmapped")
            + (" %s " % extra if extra else "  ") + "arenas (KiB each)")


def table_row(t, x, extra=""):
    """One sample's row (t unrounded, as the run's clock read it)."""
    return ("%8.0f %10d %10d %10d %12d %8d %6d %6d %8d" % (t, x["rss_kib"], x["anon_kib"],
                                                          x["file_kib"], x["heap_kib"],
                                                          x["sqlite_kib"], x["fds"],
                                                          x["load_conns"], x["mmapped_chunks"])
            + (" %s " % extra if extra else "  ") + " ".join(str(k) for k in x["arena_kib"]))


def stop_batchgate(srv, timeout=60):
    """SIGTERM; its exit code, or -1 when it had to be killed."""
    srv.send_signal(signal.SIGTERM)
    try:
        return srv.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        srv.kill()
        srv.wait()
        return -1


def ends(samples, warmup_s, sample_s, keys):
    """The baseline (median of the first minute of samples from warmup_s on)
    and the end (median of the last minute) of each key, each with the time
    of its first (baseline) or last (end) sample. Each end is the median of a
    minute: one sample moves by a percent with whatever is in flight at that
    instant."""
    def med(xs, key):
        v = sorted(x[key] for x in xs)
        return v[len(v) // 2]
    n_end = max(1, int(60 / sample_s))
    after = [x for x in samples if x["t"] >= warmup_s]
    head, tail = after[:n_end] or samples[-1:], after[-n_end:] or samples[-1:]
    base = dict({"t": head[0]["t"]}, **{k: med(head, k) for k in keys})
    last = dict({"t": tail[-1]["t"]}, **{k: med(tail, k) for k in keys})
    return base, last


def slope_per_min(samples, warmup_s, key):
    """The least-squares slope of `key` over the samples from warmup_s on,
    per minute (None with fewer than 3 samples)."""
    xs = [(x["t"] / 60.0, x[key]) for x in samples if x["t"] >= warmup_s]
    if len(xs) < 3:
        return None
    mt = sum(t for t, _ in xs) / len(xs)
    mv = sum(v for _, v in xs) / len(xs)
    den = sum((t - mt) ** 2 for t, _ in xs)
    return sum((t - mt) * (v - mv) for t, v in xs) / den if den else None


def heap_trend(samples, warmup_s):
    """How the heap in use moved over the run and how much of that was
    SQLite's (its caches grow with the database up to cache_size, then stay):
    a dict for --json, and a line to print."""
    tr = {k: slope_per_min(samples, warmup_s, k)
          for k in ("heap_kib", "sqlite_kib", "sqlite_cache_kib")}
    last = samples[-1] if samples else {}
    if tr["heap_kib"] is None or last.get("sqlite_kib", -1) < 0:
        return tr, "heap trend: not enough samples (or no SQLite figures)"
    rest = tr["heap_kib"] - tr["sqlite_kib"]
    return (dict(tr, heap_without_sqlite_kib=rest),
            "heap trend (least squares, after the warmup): %+.1f KiB/min, of it SQLite %+.1f "
            "(its page caches %+.1f, now %d KiB); the rest %+.1f KiB/min"
            % (tr["heap_kib"], tr["sqlite_kib"], tr["sqlite_cache_kib"],
               last["sqlite_cache_kib"], rest))


def flat(base, last):
    """The rule: RSS within 2% of the baseline, the server's own fds within
    2% or 2 descriptors, whichever is larger. (ok_rss, ok_fds, rss_drift,
    fd_drift)."""
    rss_drift = (last["rss_kib"] - base["rss_kib"]) / base["rss_kib"]
    fd_drift = last["own_fds"] - base["own_fds"]
    return (abs(rss_drift) <= 0.02, abs(fd_drift) <= max(2, 0.02 * base["own_fds"]),
            rss_drift, fd_drift)


# ---- heaptrack: what is live, as opposed to what the allocator holds ----
#
# The heap trend above is glibc's "in use" (mallinfo2), which also counts
# the chunks each thread's tcache keeps: it can creep while batchgate's own
# allocations stay flat. With --heaptrack the server runs under heaptrack's
# preload library, writing its raw trace to a file; after the run the trace
# is cut at two moments (the end of the warmup and the last sample) and
# each cut is interpreted as if the process had stopped there, so that
# every allocation not yet freed counts as leaked: the live heap, by site.
HEAPTRACK_DIRS = ("/usr/lib/heaptrack", "/usr/lib/x86_64-linux-gnu/heaptrack",
                  "/usr/local/lib/heaptrack", "/usr/lib64/heaptrack")


def _heaptrack_dir():
    """Where heaptrack's preload library and interpreter are; SystemExit
    naming the package when it is not installed."""
    for d in HEAPTRACK_DIRS:
        if os.path.exists(os.path.join(d, "libheaptrack_preload.so")) and \
                os.path.exists(os.path.join(d, "libexec", "heaptrack_interpret")):
            return d
    raise SystemExit("--heaptrack: heaptrack is not installed (apt-get install heaptrack)")


def heaptrack_env(raw):
    """The environment that makes batchgate write heaptrack's raw trace to
    the file `raw`."""
    return {"LD_PRELOAD": os.path.join(_heaptrack_dir(), "libheaptrack_preload.so"),
            "DUMP_HEAPTRACK_OUTPUT": raw}


def _heaptrack_cut(raw, t_s):
    """The raw trace's length up to its first timestamp line ("c <hex ms>")
    at or after t_s seconds of the process's life (all of it if none)."""
    want = int(t_s * 1000)
    size = os.path.getsize(raw)
    with open(raw, "rb") as f:
        off, tail = 0, b""
        while True:
            chunk = f.read(1 << 24)
            if not chunk:
                return size
            buf = tail + chunk
            base = off - len(tail)
            i = buf.find(b"\nc ")
            while i >= 0:
                j = buf.find(b"\n", i + 1)
                if j < 0:
                    break
                try:
                    if int(buf[i + 3:j], 16) >= want:
                        return base + i + 1
                except ValueError:
                    pass
                i = buf.find(b"\nc ", j)
            tail = buf[-64:]
            off += len(chunk)


def _heaptrack_live(raw, t_s, out):
    """The live heap t_s seconds into the process: (bytes, {site: bytes})."""
    d = _heaptrack_dir()
    n = _heaptrack_cut(raw, t_s)
    subprocess.run("head -c %d '%s' | '%s' | gzip -1 > '%s'"
                   % (n, raw, os.path.join(d, "libexec", "heaptrack_interpret"), out),
                   shell=True, check=True, stderr=subprocess.DEVNULL)
    text = subprocess.run(["heaptrack_print", "-f", out, "-l", "-n", "400", "-s", "0",
                           "--print-peaks", "0", "--print-allocators", "0",
                           "--print-temporary", "0"], capture_output=True, text=True).stdout
    scale = {"B": 1, "K": 1e3, "M": 1e6, "G": 1e9}

    def size(word):
        return float(word[:-1]) * scale[word[-1]] if word[-1] in scale else float(word)
    total, sites, lines = 0.0, {}, text.splitlines()
    for k, line in enumerate(lines):
        if line.startswith("total memory leaked:"):
            total = size(line.split()[-1])
        elif " leaked over " in line and not line.startswith(" ") and k + 2 < len(lines):
            # "<size> leaked over <n> calls from" / "<function>" / "  at <file:line>"
            site = lines[k + 1].strip()
            where = lines[k + 2].strip().split()
            if len(where) == 2 and where[0] in ("at", "in"):
                site += " " + os.path.basename(where[1])
            sites[site] = sites.get(site, 0) + size(line.split()[0])
    return total, sites


def heaptrack_report(raw, t_from, t_to, workdir):
    """The live heap at t_from and t_to (seconds into the run) from the raw
    trace, which is deleted then (gigabytes in a long run): a dict for --json
    and the line to print."""
    a_total, a = _heaptrack_live(raw, t_from, os.path.join(workdir, "heaptrack_from.gz"))
    b_total, b = _heaptrack_live(raw, t_to, os.path.join(workdir, "heaptrack_to.gz"))
    os.remove(raw)
    per_min = (b_total - a_total) / 1024 / max((t_to - t_from) / 60, 1e-9)
    grew = sorted(((b.get(k, 0) - a.get(k, 0), k) for k in set(a) | set(b)), reverse=True)[:5]
    res = {"from_s": t_from, "to_s": t_to, "live_from_bytes": a_total, "live_to_bytes": b_total,
           "kib_per_min": per_min,
           "grew_most": [{"site": k, "bytes": d} for d, k in grew if d > 0]}
    line = ("heaptrack: live heap %.0f KiB at %.0f s, %.0f KiB at %.0f s (%+.1f KiB/min)"
            % (a_total / 1024, t_from, b_total / 1024, t_to, per_min))
    if res["grew_most"]:
        line += "; grew most: " + ", ".join("%s %+.1f KiB" % (x["site"], x["bytes"] / 1024)
                                            for x in res["grew_most"])
    return res, line
