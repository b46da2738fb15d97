#!/usr/bin/env python3
"""llama_probe.py - starts real llama-server replicas (built by scripts/fetch-llm)
on loopback and measures what batchgate's LLM pools will rely on: OpenAI's
shapes (/v1/models, chat completions, streamed and not, `usage`,
`stream_options.include_usage`), the `llamacpp:*` names on /metrics, the time
to first token of a ~577-token prompt uncached and cached on the same replica
(and on the other replica), that a client hanging up mid-stream frees the slot,
and each replica's startup time and resident memory.

    out=$(scripts/fetch-llm)
    python3 tests/llm/llama_probe.py --server "$(echo "$out" | sed -n 1p)" \\
        --model "$(echo "$out" | sed -n 2p)" [--replicas 2] [--json FILE]

Human-readable lines go to stderr, one JSON summary to stdout (or --json).
Exit status 1 when a shape the pools rely on is missing. Standard library
only; every socket has a timeout, every wait a deadline, and the replicas are
stopped at exit. The replicas run under `nice -n 19` (--nice) with one thread
each, so numbers taken on a busy machine are upper bounds: the load average
is in the summary.

The helpers (Replica, scrape, chat, stream_chat) are meant for the pool tests.
"""

import argparse
import atexit
import http.client
import json
import os
import socket
import subprocess
import sys
import time

MODEL_ID = "smollm2"
_replicas = []


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Replica:
    """One llama-server process on 127.0.0.1; self.startup_s is the time from
    spawn to /health answering 200."""

    def __init__(self, server, model, port=None, slots=2, threads=1, ctx=8192, nice=19,
                 log_path=None, timeout=120.0, extra=()):
        self.port = port or free_port()
        argv = [server, "-m", model, "--host", "127.0.0.1", "--port", str(self.port),
                "--metrics", "-np", str(slots), "-t", str(threads), "-tb", str(threads),
                "-c", str(ctx), "--alias", MODEL_ID] + list(extra)
        if nice:
            argv = ["nice", "-n", str(nice)] + argv
        self.argv = argv
        self.log_path = log_path or os.devnull
        self._log = open(self.log_path, "wb")
        t0 = time.monotonic()
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=self._log,
                                     stderr=subprocess.STDOUT)
        _replicas.append(self)
        deadline = t0 + timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError("llama-server on port %d exited with %s; log: %s"
                                   % (self.port, self.proc.returncode, self.log_path))
            try:
                st, _, _ = request(self.port, "GET", "/health", timeout=2)
                if st == 200:
                    break
            except OSError:
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("llama-server on port %d not healthy within %.0f s; log: %s"
                                   % (self.port, timeout, self.log_path))
            time.sleep(0.05)
        self.startup_s = time.monotonic() - t0

    def rss_mb(self):
        """VmRSS of the server (nice execs it: same pid)."""
        try:
            with open("/proc/%d/status" % self.proc.pid) as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        return int(line.split()[1]) / 1024.0
        except OSError:
            pass
        return None

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self._log.close()


@atexit.register
def _stop_all():
    for r in _replicas:
        try:
            r.stop()
        except Exception:  # noqa: BLE001 - best effort at exit
            pass


def request(port, method, path, body=None, timeout=300):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        data = json.dumps(body).encode() if body is not None else None
        headers = {"Content-Type": "application/json"} if data is not None else {}
        c.request(method, path, body=data, headers=headers)
        r = c.getresponse()
        return r.status, dict(r.getheaders()), r.read()
    finally:
        c.close()


def scrape(port):
    """/metrics as {name: value} for the unlabelled llamacpp:* samples."""
    st, _, body = request(port, "GET", "/metrics", timeout=10)
    if st != 200:
        raise RuntimeError("/metrics answered %d (is --metrics on?)" % st)
    out = {}
    for line in body.decode().splitlines():
        if line.startswith("#") or not line.strip():
            continue
        name, _, value = line.rpartition(" ")
        if "{" not in name:
            out[name] = float(value)
    return out


def chat(port, messages, **kw):
    body = dict(model=MODEL_ID, messages=messages, **kw)
    st, _, raw = request(port, "POST", "/v1/chat/completions", body)
    return st, json.loads(raw)


def stream_chat(port, messages, on_chunk=None, timeout=300, **kw):
    """Streams a chat completion; returns (chunks, t_first_content, t_end), the
    times in seconds from sending. on_chunk(i, chunk) returning False hangs up."""
    body = dict(model=MODEL_ID, messages=messages, stream=True, **kw)
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    t0 = time.monotonic()
    c.request("POST", "/v1/chat/completions", body=json.dumps(body).encode(),
              headers={"Content-Type": "application/json"})
    r = c.getresponse()
    if r.status != 200:
        raise RuntimeError("stream answered %d: %r" % (r.status, r.read()[:300]))
    chunks, t_first, done = [], None, False
    try:
        while True:
            line = r.fp.readline()
            if not line:
                break
            line = line.strip()
            if not line.startswith(b"data:"):
                continue
            data = line[5:].strip()
            if data == b"[DONE]":
                done = True
                break
            ch = json.loads(data)
            chunks.append(ch)
            if t_first is None and any((c_.get("delta") or {}).get("content")
                                       for c_ in ch.get("choices", [])):
                t_first = time.monotonic() - t0
            if on_chunk is not None and on_chunk(len(chunks) - 1, ch) is False:
                break
    finally:
        # Closing without reading on is what a client hanging up does.
        r.close()
        c.close()
    return chunks, t_first, time.monotonic() - t0, done


def long_prompt(port, nonce, want_tokens=560):
    """A user message of about want_tokens tokens (by the server's /tokenize),
    starting with nonce so that two nonces share no prefix."""
    sentence = ("The gateway forwards each request to the replica that already holds "
                "the longest matching prefix in its cache, and otherwise to the least loaded one. ")
    text = "Request %s. " % nonce
    while True:
        st, _, raw = request(port, "POST", "/tokenize", {"content": text + sentence})
        if len(json.loads(raw)["tokens"]) > want_tokens:
            return text + "Summarise this in one sentence."
        text += sentence


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--server", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--replicas", type=int, default=2)
    ap.add_argument("--slots", type=int, default=2, help="llama-server -np")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--nice", type=int, default=19)
    ap.add_argument("--logdir", default=None, help="keep each replica's log here")
    ap.add_argument("--json", default=None, help="write the summary here instead of stdout")
    a = ap.parse_args()

    problems = []

    def check(ok, what):
        if not ok:
            problems.append(what)
            log("MISSING:", what)

    res = {"loadavg_start": os.getloadavg()[0], "replicas": []}
    ver = subprocess.run([a.server, "--version"], capture_output=True, text=True, timeout=30)
    res["version"] = (ver.stdout + ver.stderr).strip().splitlines()[-2:]
    reps = []
    for i in range(a.replicas):
        lp = os.path.join(a.logdir, "replica%d.log" % i) if a.logdir else None
        r = Replica(a.server, a.model, slots=a.slots, threads=a.threads, nice=a.nice, log_path=lp)
        reps.append(r)
        log("replica %d: port %d healthy after %.2f s, RSS %.0f MB"
            % (i, r.port, r.startup_s, r.rss_mb()))
        res["replicas"].append({"port": r.port, "startup_s": round(r.startup_s, 3),
                                "rss_mb_idle": round(r.rss_mb(), 1)})
    r0, r1 = reps[0].port, reps[-1].port
    res["argv"] = reps[0].argv

    # /v1/models
    st, _, raw = request(r0, "GET", "/v1/models")
    models = json.loads(raw)
    check(st == 200 and models.get("object") == "list" and models["data"][0].get("id") == MODEL_ID,
          "/v1/models: object list with data[0].id == alias")
    res["v1_models"] = {"status": st, "ids": [m.get("id") for m in models.get("data", [])],
                        "keys": sorted(models.keys()), "model_keys": sorted(models["data"][0].keys())}

    # Non-streaming chat.
    msgs = [{"role": "user", "content": "Say hello in five words."}]
    st, body = chat(r0, msgs, max_tokens=16, temperature=0)
    u = body.get("usage") or {}
    check(st == 200 and body.get("object") == "chat.completion", "chat: object chat.completion")
    check(bool(body.get("choices")) and "content" in body["choices"][0].get("message", {}),
          "chat: choices[0].message.content")
    check(all(k in u for k in ("prompt_tokens", "completion_tokens", "total_tokens")),
          "chat: usage.{prompt,completion,total}_tokens")
    res["chat"] = {"status": st, "keys": sorted(body.keys()), "usage": u,
                   "finish_reason": body.get("choices", [{}])[0].get("finish_reason"),
                   "content": body.get("choices", [{}])[0].get("message", {}).get("content")}

    # Streaming, without and with stream_options.include_usage.
    for label, extra in (("stream", {}), ("stream_include_usage",
                                          {"stream_options": {"include_usage": True}})):
        chunks, tf, te, done = stream_chat(r0, msgs, max_tokens=16, temperature=0, **extra)
        with_usage = [c for c in chunks if c.get("usage")]
        last = chunks[-1] if chunks else {}
        check(done, label + ": ends with data: [DONE]")
        check(all(c.get("object") == "chat.completion.chunk" for c in chunks),
              label + ": every chunk is chat.completion.chunk")
        res[label] = {"chunks": len(chunks), "done": done, "ttft_s": tf and round(tf, 3),
                      "chunks_with_usage": len(with_usage),
                      "first_chunk_delta": chunks[0]["choices"][0].get("delta") if chunks else None,
                      "last_chunk_choices": len(last.get("choices", [])),
                      "last_chunk_has_usage": bool(last.get("usage")),
                      "last_chunk_extra_keys": sorted(set(last) - {"choices", "created", "id", "model",
                                                                  "object", "system_fingerprint",
                                                                  "usage"})}
    check(res["stream_include_usage"]["last_chunk_has_usage"]
          and res["stream_include_usage"]["last_chunk_choices"] == 0,
          "stream_options.include_usage: a last chunk with choices [] and usage")

    # /v1/completions (legacy text completions), non-streaming.
    st, _, raw = request(r0, "POST", "/v1/completions",
                         {"model": MODEL_ID, "prompt": "The capital of France is", "max_tokens": 8,
                          "temperature": 0})
    body = json.loads(raw)
    check(st == 200 and body.get("object") == "text_completion" and "text" in body["choices"][0]
          and "usage" in body, "/v1/completions: text_completion with choices[0].text and usage")
    res["completions"] = {"status": st, "object": body.get("object"), "usage": body.get("usage")}

    # /metrics names.
    m = scrape(r0)
    res["metrics_names"] = sorted(m)
    for n in ("llamacpp:prompt_tokens_total", "llamacpp:prompt_tokens_cached_total",
              "llamacpp:requests_processing", "llamacpp:requests_deferred"):
        check(n in m, "/metrics: " + n)

    # TTFT of a ~577-token prompt: uncached, cached on the same replica, and on the other one.
    prompt = long_prompt(r0, "alpha-%d" % os.getpid())
    lm = [{"role": "user", "content": prompt}]
    ttft = {}
    for label, port in (("uncached", r0), ("cached_same_replica", r0), ("cached_again", r0),
                        ("other_replica", r1)):
        before = scrape(port)
        chunks, tf, te, _ = stream_chat(port, lm, max_tokens=4, temperature=0,
                                        stream_options={"include_usage": True})
        after = scrape(port)
        usage = next((c["usage"] for c in chunks if c.get("usage")), {})
        ttft[label] = {
            "port": port, "ttft_s": tf and round(tf, 3), "total_s": round(te, 3),
            "prompt_tokens": usage.get("prompt_tokens"),
            "computed": after.get("llamacpp:prompt_tokens_total", 0)
            - before.get("llamacpp:prompt_tokens_total", 0),
            "cached": after.get("llamacpp:prompt_tokens_cached_total", 0)
            - before.get("llamacpp:prompt_tokens_cached_total", 0),
            "usage_cached_tokens": (usage.get("prompt_tokens_details") or {}).get("cached_tokens"),
        }
        log("ttft %-20s %s" % (label, ttft[label]))
    res["ttft_577"] = ttft
    if ttft["uncached"]["ttft_s"] and ttft["cached_same_replica"]["ttft_s"]:
        res["ttft_577"]["ratio_uncached_over_cached"] = round(
            ttft["uncached"]["ttft_s"] / ttft["cached_same_replica"]["ttft_s"], 1)

    # Does the first prompt stay cached on r0 after two other long prompts took
    # both slots (-np 2)? It can, through the host-RAM prompt cache (--cache-ram).
    for k in ("beta", "gamma"):
        stream_chat(r0, [{"role": "user", "content": long_prompt(r0, "%s-%d" % (k, os.getpid()))}],
                    max_tokens=4, temperature=0)
    before = scrape(r0)
    chunks, tf, _, _ = stream_chat(r0, lm, max_tokens=4, temperature=0)
    after = scrape(r0)
    res["ttft_577"]["after_two_other_prompts"] = {
        "port": r0, "ttft_s": tf and round(tf, 3),
        "computed": after["llamacpp:prompt_tokens_total"] - before["llamacpp:prompt_tokens_total"],
        "cached": after["llamacpp:prompt_tokens_cached_total"]
        - before["llamacpp:prompt_tokens_cached_total"]}
    log("ttft %-20s %s" % ("after_two_other", res["ttft_577"]["after_two_other_prompts"]))

    # A client that hangs up mid-stream frees its slot.
    seen = {}

    def hang_up_after_5(i, ch):
        if i == 1:
            seen["processing_during"] = scrape(r0).get("llamacpp:requests_processing")
        return i < 5

    chunks, _, _, _ = stream_chat(r0, [{"role": "user", "content": "Count from 1 to 1000."}],
                                  on_chunk=hang_up_after_5, max_tokens=2000, ignore_eos=True)
    t0 = time.monotonic()
    freed = None
    while time.monotonic() - t0 < 30:
        if scrape(r0).get("llamacpp:requests_processing") == 0:
            freed = time.monotonic() - t0
            break
        time.sleep(0.02)
    after = scrape(r0)
    check(freed is not None, "disconnect mid-stream: requests_processing back to 0")
    res["disconnect"] = {"chunks_read": len(chunks),
                         "requests_processing_during": seen.get("processing_during"),
                         "freed_after_s": freed and round(freed, 3),
                         "tokens_predicted_total_after": after.get("llamacpp:tokens_predicted_total")}
    time.sleep(1.0)
    res["disconnect"]["tokens_predicted_total_1s_later"] = scrape(r0).get(
        "llamacpp:tokens_predicted_total")

    for i, r in enumerate(reps):
        res["replicas"][i]["rss_mb_after"] = round(r.rss_mb(), 1)
    res["loadavg_end"] = os.getloadavg()[0]
    res["problems"] = problems
    for r in reps:
        r.stop()

    out = json.dumps(res, indent=2)
    if a.json:
        with open(a.json, "w") as f:
            f.write(out + "\n")
    else:
        print(out)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
