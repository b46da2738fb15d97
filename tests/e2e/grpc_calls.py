"""grpc_calls.py - Triton's own gRPC client (tritonclient.grpc, unmodified)
and the protocol's generated stub (tritonclient.grpc.service_pb2_grpc)
against a running batchgate. Not a test module: it needs tritonclient,
grpcio and numpy, so it runs under the interpreter of the virtual
environment scripts/fetch-testdeps makes, started by test_grpc.py, which
owns the server and its repository:

    VENV/bin/python grpc_calls.py --grpc 127.0.0.1:PORT --http 127.0.0.1:PORT \\
        --case surface|auth|limits [--key KEY --other-key KEY]

Each check prints "ok: ..." as it passes; the first that fails prints
"FAIL: ..." with the reason and exits 1. Numbers are checked against the
same server's HTTP answers (tritonclient.http), which the rest of the
suite checks against references: gRPC must mean exactly what HTTP means.
Every call has a deadline; every wait is bounded."""

import argparse
import json
import sys
import threading
import time
import urllib.request

import grpc
import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.grpc import service_pb2, service_pb2_grpc
from tritonclient.utils import InferenceServerException


class CheckFailed(Exception):
    pass


def expect(cond, what):
    if not cond:
        raise CheckFailed(what)


def ok(what):
    print("ok: " + what, flush=True)


def http_json(http, path, method="GET", body=None, headers=None):
    req = urllib.request.Request("http://%s%s" % (http, path), method=method,
                                 data=body.encode() if body is not None else None,
                                 headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, json.loads(r.read() or b"null")
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")


def rpc_error(fn, *args, **kwargs):
    """Calls a stub method that must fail: its grpc.RpcError."""
    try:
        fn(*args, **kwargs)
    except grpc.RpcError as e:
        return e
    raise CheckFailed("%s succeeded; an error was expected" % getattr(fn, "_method", fn))


def infer_request(model, x, name="input", raw=True, **kw):
    req = service_pb2.ModelInferRequest(model_name=model, **kw)
    t = req.inputs.add(name=name, datatype="FP32", shape=list(x.shape))
    if raw:
        req.raw_input_contents.append(x.astype("<f4").tobytes())
    else:
        t.contents.fp32_contents.extend(x.ravel().tolist())
    return req


def output_of(resp, i=0):
    o = resp.outputs[i]
    return np.frombuffer(resp.raw_output_contents[i], dtype="<f4").reshape(list(o.shape))


# ---------------------------------------------------------------- surface

def check_surface(a):
    g = grpcclient.InferenceServerClient(a.grpc)
    h = httpclient.InferenceServerClient(a.http)
    chan = grpc.insecure_channel(a.grpc)
    stub = service_pb2_grpc.GRPCInferenceServiceStub(chan)

    # Health and metadata: what HTTP says.
    st, _ = http_json(a.http, "/v2/health/ready")
    expect(g.is_server_live() and g.is_server_ready() == (st == 200) and st == 503,
           "live; not ready, as HTTP says (503: a model failed to load)")
    md = g.get_server_metadata()
    st, hmd = http_json(a.http, "/v2")
    expect(md.name == hmd["name"] == "batchgate" and md.version == hmd["version"],
           "server metadata %r vs HTTP %r" % (md, hmd))
    expect(list(md.extensions) == hmd["extensions"], "extensions as HTTP lists them")
    ok("ServerLive, ServerReady, ServerMetadata (%s %s)" % (md.name, md.version))

    expect(g.is_model_ready("digits"), "digits is ready")
    expect(not g.is_model_ready("broken"), "a model that failed to load is not ready")
    # As Triton: an unknown model or version is not ready, not an error
    # (is_model_ready raised, where code written for Triton branches).
    expect(not g.is_model_ready("nosuch"), "an unknown model is not ready")
    expect(not g.is_model_ready("digits", "7"), "an unknown version is not ready")
    ok("ModelReady: true, false (failed load, unknown model or version)")

    mm = g.get_model_metadata("digits", as_json=True)
    st, hm = http_json(a.http, "/v2/models/digits")
    expect(st == 200, "HTTP metadata")
    for k in ("name", "versions", "platform"):
        expect(mm[k] == hm[k], "metadata %s: gRPC %r, HTTP %r" % (k, mm[k], hm[k]))
    for side in ("inputs", "outputs"):
        expect([(t["name"], t["datatype"], [int(s) for s in t["shape"]]) for t in mm[side]] ==
               [(t["name"], t["datatype"], t["shape"]) for t in hm[side]],
               "metadata %s: gRPC %r, HTTP %r" % (side, mm[side], hm[side]))
    ok("ModelMetadata equals GET /v2/models/digits")

    cfg = g.get_model_config("digits", as_json=True)["config"]
    st, hc = http_json(a.http, "/v2/models/digits/config")
    expect(cfg["name"] == hc["name"] and int(cfg["max_batch_size"]) == hc["max_batch_size"],
           "config: %r vs %r" % (cfg, hc))
    expect(cfg["input"][0]["data_type"] == hc["input"][0]["data_type"] == "TYPE_FP32" and
           [int(d) for d in cfg["input"][0]["dims"]] == hc["input"][0]["dims"],
           "config input: %r vs %r" % (cfg["input"], hc["input"]))
    expect(cfg["instance_group"][0]["kind"] == hc["instance_group"][0]["kind"],
           "instance_group kind")
    expect(int(cfg["dynamic_batching"]["max_queue_delay_microseconds"]) ==
           hc["dynamic_batching"]["max_queue_delay_microseconds"], "dynamic_batching")
    ok("ModelConfig equals GET /v2/models/digits/config (max_batch_size %s)"
       % cfg["max_batch_size"])

    # Inference: the same bits as HTTP's binary answer.
    rng = np.random.default_rng(7)
    x = rng.random((5, 64), dtype=np.float32)
    hi = httpclient.InferInput("input", [5, 64], "FP32")
    hi.set_data_from_numpy(x, binary_data=True)
    want = h.infer("digits", [hi], outputs=[httpclient.InferRequestedOutput(
        "output", binary_data=True)]).as_numpy("output")
    gi = grpcclient.InferInput("input", [5, 64], "FP32")
    gi.set_data_from_numpy(x)
    r = g.infer("digits", [gi], request_id="req-7")
    got = r.as_numpy("output")
    expect(got.shape == (5, 10) and np.array_equal(got, want),
           "ModelInfer output differs from HTTP's: %r vs %r" % (got, want))
    expect(r.get_response().id == "req-7" and r.get_response().model_name == "digits",
           "id and model_name echoed: %r" % r.get_response())
    expect(np.allclose(got.sum(axis=1), 1, atol=1e-5), "softmax rows sum to 1")
    ok("ModelInfer (raw_input_contents) equals HTTP bit for bit, id echoed")

    resp = stub.ModelInfer(infer_request("digits", x, raw=False), timeout=10)
    expect(np.array_equal(output_of(resp), want), "typed fp32_contents: same answer")
    ok("ModelInfer with typed fp32_contents")

    r = g.infer("digits", [gi], outputs=[grpcclient.InferRequestedOutput("output")])
    expect(np.array_equal(r.as_numpy("output"), want), "requested output by name")
    for alg in ("gzip", "deflate"):
        r = g.infer("digits", [gi], compression_algorithm=alg)
        expect(np.array_equal(r.as_numpy("output"), want), "compressed %s: same answer" % alg)
    ok("requested outputs; gzip and deflate compressed requests")

    # Calls from many clients at once are batched together, like HTTP's.
    s0 = g.get_inference_statistics("digits", as_json=True)["model_stats"][0]
    n_calls, results, errors, lock = 48, {}, [], threading.Lock()
    done = threading.Event()
    xs = [rng.random((1, 64), dtype=np.float32) for _ in range(n_calls)]

    def cb(i, result, error):
        with lock:
            if error is not None:
                errors.append(error)
            else:
                results[i] = result.as_numpy("output")
            if len(results) + len(errors) == n_calls:
                done.set()

    for i in range(n_calls):
        inp = grpcclient.InferInput("input", [1, 64], "FP32")
        inp.set_data_from_numpy(xs[i])
        g.async_infer("digits", [inp], callback=lambda result, error, i=i: cb(i, result, error),
                      client_timeout=30)
    expect(done.wait(60), "48 async calls answered within 60 s")
    expect(not errors, "async calls failed: %r" % errors[:3])
    stacked = np.concatenate(xs)
    hi = httpclient.InferInput("input", [n_calls, 64], "FP32")
    hi.set_data_from_numpy(stacked, binary_data=True)
    want_all = h.infer("digits", [hi]).as_numpy("output")
    for i in range(n_calls):
        expect(np.allclose(results[i][0], want_all[i], rtol=1e-6, atol=1e-7),
               "async call %d: %r vs %r" % (i, results[i], want_all[i]))
    s1 = g.get_inference_statistics("digits", as_json=True)["model_stats"][0]
    rows = int(s1["inference_count"]) - int(s0["inference_count"])
    batches = int(s1["execution_count"]) - int(s0["execution_count"])
    expect(rows == n_calls + n_calls, "inference_count grew by the rows: %d" % rows)
    ok("48 concurrent gRPC calls: right answers, %d rows in %d batches (HTTP's 48-row call "
       "included)" % (rows, batches))

    # Statistics: the same numbers as HTTP's, one model and all of them.
    gs = g.get_inference_statistics("digits", as_json=True)["model_stats"][0]
    st, hs = http_json(a.http, "/v2/models/digits/stats")
    hs = hs["model_stats"][0]
    expect(int(gs["inference_count"]) == hs["inference_count"] and
           int(gs["execution_count"]) == hs["execution_count"] and
           int(gs["inference_stats"]["success"]["count"]) ==
           hs["inference_stats"]["success"]["count"],
           "statistics differ: gRPC %r, HTTP %r" % (gs, hs))
    expect(sum(int(b["compute_infer"]["count"]) for b in gs["batch_stats"]) ==
           hs["execution_count"], "batch_stats counts sum to execution_count")
    everyone = g.get_inference_statistics(as_json=True)["model_stats"]
    st, hall = http_json(a.http, "/v2/models/stats")
    expect(sorted(m["name"] for m in everyone) == sorted(m["name"] for m in hall["model_stats"])
           and len(everyone) >= 4, "all-model statistics: %r" % [m["name"] for m in everyone])
    ok("ModelStatistics for digits (%s rows, %s batches) and for all %d models equal HTTP's"
       % (gs["inference_count"], gs["execution_count"], len(everyone)))

    # The repository: index, load (a lazy model, then with a config), unload.
    idx = {m["name"]: m for m in g.get_model_repository_index(as_json=True)["models"]}
    st, hidx = http_json(a.http, "/v2/repository/index", "POST", "{}")
    expect(set(idx) == {m["name"] for m in hidx}, "index: %r vs %r" % (idx, hidx))
    expect(idx["digits"]["state"] == "READY" and idx["lz"].get("state") != "READY",
           "index states: %r" % idx)
    g.load_model("lz")
    expect(g.is_model_ready("lz"), "lz READY once load_model returned")
    over = json.loads(a.override)
    g.load_model("lz", config=json.dumps(over))
    c = g.get_model_config("lz", as_json=True)["config"]
    expect(int(c["max_batch_size"]) == over["batching"]["max_batch_size"],
           "load_model(config=...) applied: max_batch_size %s" % c["max_batch_size"])
    g.unload_model("lz")
    t_end = time.monotonic() + 10
    while g.is_model_ready("lz") and time.monotonic() < t_end:
        time.sleep(0.05)
    expect(not g.is_model_ready("lz"), "lz unloaded")
    try:
        g.load_model("nosuch")
        raise CheckFailed("load_model of an unknown model succeeded")
    except InferenceServerException as ex:
        expect("NOT_FOUND" in str(ex.status()) or "nosuch" in ex.message(),
               "load_model(unknown): %s %s" % (ex.status(), ex.message()))
    ok("RepositoryIndex, RepositoryModelLoad (lazy, with a config), RepositoryModelUnload")

    # Log settings: read, change, read back over HTTP.
    ls = g.get_log_settings(as_json=True)["settings"]
    expect("log_verbose_level" in ls and "log_info" in ls, "log settings: %r" % ls)
    g.update_log_settings({"log_verbose_level": 1})
    st, hl = http_json(a.http, "/v2/logging")
    expect(hl["log_verbose_level"] == 1, "log_verbose_level 1 over HTTP: %r" % hl)
    g.update_log_settings({"log_verbose_level": 0})
    e = rpc_error(stub.LogSettings, service_pb2.LogSettingsRequest(settings={
        "log_colour": service_pb2.LogSettingsRequest.SettingValue(bool_param=True)}), timeout=10)
    expect(e.code() == grpc.StatusCode.INVALID_ARGUMENT and "log_colour" in e.details(),
           "a bad log setting: %s %r" % (e.code(), e.details()))
    ok("LogSettings: read, update (read back over HTTP), a bad one INVALID_ARGUMENT")

    # Errors, mapped as docs/GRPC.md says.
    e = rpc_error(stub.ModelInfer, infer_request("nosuch", x), timeout=10)
    expect(e.code() == grpc.StatusCode.NOT_FOUND and "nosuch" in e.details(),
           "unknown model: %s %r" % (e.code(), e.details()))
    e = rpc_error(stub.ModelInfer, infer_request("digits", x[:, :60]), timeout=10)
    expect(e.code() == grpc.StatusCode.INVALID_ARGUMENT and "shape" in e.details(),
           "wrong shape: %s %r" % (e.code(), e.details()))
    e = rpc_error(stub.ModelInfer, infer_request("broken", x), timeout=10)
    expect(e.code() == grpc.StatusCode.UNAVAILABLE, "a failed model: %s %r"
           % (e.code(), e.details()))
    req = infer_request("digits", x)
    req.raw_input_contents.append(b"1234")
    e = rpc_error(stub.ModelInfer, req, timeout=10)
    expect(e.code() == grpc.StatusCode.INVALID_ARGUMENT and "raw_input_contents" in e.details(),
           "raw contents count: %s %r" % (e.code(), e.details()))
    # A version that is no integer is INVALID_ARGUMENT, as Triton answers
    # (it was NOT_FOUND); leading zeros are read past ("01" is 1).
    e = rpc_error(stub.ModelInfer, infer_request("digits", x, model_version="abc"), timeout=10)
    expect(e.code() == grpc.StatusCode.INVALID_ARGUMENT and "integer" in e.details(),
           "version abc: %s %r" % (e.code(), e.details()))
    expect(g.get_model_metadata("digits", model_version="01", as_json=True)["name"] == "digits",
           "version 01 is version 1")
    ok("NOT_FOUND, INVALID_ARGUMENT (shape, raw contents, version), UNAVAILABLE (failed model)")

    # The slow model (300 ms a batch, one at a time, a queue of 1): with
    # its worker busy, a call whose budget is shorter than a batch is
    # hopeless at once, and the server says so at once (504).
    xs4 = np.zeros((1, 4), dtype=np.float32)
    stub.ModelInfer(infer_request("slow", xs4, name="x"), timeout=30)
    busy = stub.ModelInfer.future(infer_request("slow", xs4, name="x"), timeout=30)
    time.sleep(0.05)
    t0 = time.monotonic()
    e = rpc_error(stub.ModelInfer, infer_request("slow", xs4, name="x"), timeout=30,
                  metadata=(("x-request-timeout-ms", "50"),))
    took = time.monotonic() - t0
    busy.result()
    # The client's own deadline (30 s) is far: only the server says "slow".
    expect(e.code() == grpc.StatusCode.DEADLINE_EXCEEDED and "slow" in e.details(),
           "a 50 ms budget behind a 300 ms batch: %s %r after %.3f s"
           % (e.code(), e.details(), took))
    busy = stub.ModelInfer.future(infer_request("slow", xs4, name="x"), timeout=30)
    time.sleep(0.05)
    t0 = time.monotonic()
    e = rpc_error(stub.ModelInfer, infer_request("slow", xs4, name="x"), timeout=0.2)
    took = time.monotonic() - t0
    busy.result()
    # Had the server ignored grpc-timeout, the client's deadline would end
    # the call with grpc's own "Deadline Exceeded", not the server's words.
    expect(e.code() == grpc.StatusCode.DEADLINE_EXCEEDED and "slow" in e.details(),
           "grpc-timeout 200 ms is the budget: the server refuses at once (%s %r after %.3f s)"
           % (e.code(), e.details(), took))
    ok("DEADLINE_EXCEEDED from the server: a 50 ms budget in metadata, and grpc-timeout as "
       "the budget (answered in %.0f ms, not at the client's deadline)" % (took * 1000))

    futs = [stub.ModelInfer.future(infer_request("slow", xs4, name="x"), timeout=30)
            for _ in range(8)]
    codes, retry = [], None
    for f in futs:
        try:
            f.result()
            codes.append("OK")
        except grpc.RpcError as ex:
            codes.append(ex.code().name)
            if ex.code() == grpc.StatusCode.RESOURCE_EXHAUSTED:
                retry = dict(ex.trailing_metadata() or ()).get("retry-after")
    expect("RESOURCE_EXHAUSTED" in codes and "OK" in codes,
           "8 calls at a queue of 1: some RESOURCE_EXHAUSTED, some OK: %r" % codes)
    expect(retry == "1", "RESOURCE_EXHAUSTED carries retry-after: 1 in its trailers: %r" % retry)
    ok("RESOURCE_EXHAUSTED with retry-after when the queue is full (%s)"
       % ",".join(sorted(set(codes))))

    # ModelStreamInfer: many requests on one stream, answered as each is
    # done (with its id), errors in the stream's responses, not its status.
    reqs = []
    for i in range(20):
        reqs.append(infer_request("digits", x[i % 5:i % 5 + 1], id="s%d" % i))
    reqs.insert(7, infer_request("nosuch", x[:1], id="bad"))
    # Refused before it runs (a version that is not one): also echoed.
    reqs.insert(12, infer_request("digits", x[:1], id="bad-version", model_version="v 1"))
    got, errs = {}, {}
    for resp in stub.ModelStreamInfer(iter(reqs), timeout=30):
        if resp.error_message:
            # Which request failed: its id, model and version come back
            # beside the message, as Triton's do.
            r = resp.infer_response
            errs[r.id] = (r.model_name, r.model_version, resp.error_message)
        else:
            got[resp.infer_response.id] = output_of(resp.infer_response)
    expect(len(got) == 20 and sorted(errs) == ["bad", "bad-version"] and
           errs["bad"][:2] == ("nosuch", "") and "nosuch" in errs["bad"][2] and
           errs["bad-version"][:2] == ("digits", "v 1") and "version" in errs["bad-version"][2],
           "stream: 20 answers and two errors naming their requests, got %d and %r"
           % (len(got), errs))
    for i in range(20):
        expect(np.array_equal(got["s%d" % i][0], want[i % 5]),
               "stream answer s%d differs from HTTP's" % i)
    g2 = grpcclient.InferenceServerClient(a.grpc)
    answers = []
    g2.start_stream(callback=lambda result, error: answers.append((result, error)))
    for i in range(5):
        inp = grpcclient.InferInput("input", [1, 64], "FP32")
        inp.set_data_from_numpy(x[i:i + 1])
        g2.async_stream_infer("digits", [inp], request_id="t%d" % i)
    g2.stop_stream()
    expect(len(answers) == 5 and all(e is None for _, e in answers), "tritonclient stream: %r"
           % answers)
    for r_, _ in answers:
        i = int(r_.get_response().id[1:])
        expect(np.array_equal(r_.as_numpy("output")[0], want[i]), "tritonclient stream answer")
    ok("ModelStreamInfer: 20 answers equal HTTP's and two errors in-stream naming their "
       "requests (stub); tritonclient's start_stream/async_stream_infer")

    # A stream open longer than the model's latency budget: each message's
    # budget and statistics count from its own arrival, not the stream's.
    def spaced():
        for i in range(3):
            if i:
                time.sleep(0.5)
            yield infer_request("budget", xs4[:1], name="x", id="b%d" % i)
    bgot = [(r.infer_response.id, r.error_message) for r in
            stub.ModelStreamInfer(spaced(), timeout=30)]
    expect(sorted(bgot) == [("b0", ""), ("b1", ""), ("b2", "")],
           "messages 0.5 s apart on a stream, budget 300 ms: all answered, got %r" % bgot)
    with urllib.request.urlopen("http://%s/v2/models/budget/stats" % a.http, timeout=10) as f:
        st = json.load(f)["model_stats"][0]["inference_stats"]
    mean_s = st["success"]["ns"] / max(st["success"]["count"], 1) / 1e9
    expect(st["success"]["count"] == 3 and mean_s < 0.3,
           "stats: 3 successes of < 0.3 s each (not the stream's age), got %d of mean %.3f s"
           % (st["success"]["count"], mean_s))
    ok("ModelStreamInfer: messages 0.5 s apart past a 300 ms budget answered; "
       "stats count each from its own arrival (mean %.1f ms)" % (mean_s * 1e3))

    e = rpc_error(stub.TraceSetting, service_pb2.TraceSettingRequest(), timeout=10)
    expect(e.code() == grpc.StatusCode.UNIMPLEMENTED and "tracing" in e.details(),
           "TraceSetting: %s %r" % (e.code(), e.details()))
    ok("UNIMPLEMENTED: tracing")

    # A client that gives up: its queued call leaves, the server serves on,
    # and the request is counted as cancelled (it was counted nowhere).
    def cancelled():
        with urllib.request.urlopen("http://%s/metrics" % a.http, timeout=10) as r:
            text = r.read().decode()
        return sum(float(l.rsplit(" ", 1)[1]) for l in text.splitlines()
                   if l.startswith('batchgate_requests_cancelled_total{model="slow",'))
    c0 = cancelled()
    f = stub.ModelInfer.future(infer_request("slow", xs4, name="x"), timeout=30)
    time.sleep(0.05)
    f.cancel()
    expect(g.is_server_live(), "live after a cancelled call")
    t_end = time.monotonic() + 5
    while cancelled() != c0 + 1 and time.monotonic() < t_end:
        time.sleep(0.05)
    expect(cancelled() == c0 + 1, "the cancelled call counted once: %r -> %r"
           % (c0, cancelled()))
    ok("a cancelled call, counted in requests_cancelled_total")


# ---------------------------------------------------------------- auth

def check_auth(a):
    chan = grpc.insecure_channel(a.grpc)
    stub = service_pb2_grpc.GRPCInferenceServiceStub(chan)
    x = np.zeros((1, 4), dtype=np.float32)
    e = rpc_error(stub.ModelInfer, infer_request("alpha", x, name="x"), timeout=10)
    expect(e.code() == grpc.StatusCode.UNAUTHENTICATED, "no key: %s %r" % (e.code(), e.details()))
    bad = (("authorization", "Bearer not-a-key"),)
    e = rpc_error(stub.ModelInfer, infer_request("alpha", x, name="x"), timeout=10, metadata=bad)
    expect(e.code() == grpc.StatusCode.UNAUTHENTICATED, "a wrong key: %s" % e.code())
    mine = (("authorization", "Bearer " + a.key),)
    resp = stub.ModelInfer(infer_request("alpha", x, name="x"), timeout=10, metadata=mine)
    expect(output_of(resp).shape == (1, 3), "with the key: an answer")
    e = rpc_error(stub.ModelInfer, infer_request("beta", x, name="x"), timeout=10, metadata=mine)
    expect(e.code() == grpc.StatusCode.PERMISSION_DENIED and "beta" in e.details(),
           "another tenant's model: %s %r" % (e.code(), e.details()))
    e = rpc_error(stub.LogSettings, service_pb2.LogSettingsRequest(settings={
        "log_verbose_level": service_pb2.LogSettingsRequest.SettingValue(uint32_param=1)}),
        timeout=10, metadata=mine)
    expect(e.code() == grpc.StatusCode.PERMISSION_DENIED, "an admin call without admin: %s"
           % e.code())
    other = (("x-api-key", a.other_key),)
    resp = stub.ModelInfer(infer_request("beta", x, name="x"), timeout=10, metadata=other)
    expect(output_of(resp).shape == (1, 3), "X-Api-Key metadata works too")
    # Values with spaces around them (grpc-core takes them): the stream was
    # reset by nghttp2's RFC 9113 check, INTERNAL with nothing logged.
    spaced = (("authorization", "Bearer %s " % a.key), ("x-custom", " bar "),
              ("x-priority", "1 "))
    resp = stub.ModelInfer(infer_request("alpha", x, name="x"), timeout=10, metadata=spaced)
    expect(output_of(resp).shape == (1, 3), "metadata values with spaces around them")
    # A message that costs to read (compressed, or over 64 KiB) from a
    # caller without a known key is refused unread: a 61 KB gzip'ed one was
    # inflated and parsed (250 ms, 115 MB) before the guard said no.
    big = np.zeros((1, 4 + 32768), dtype=np.float32)    # 128 KiB: refused for its size
    zeros = np.zeros((1, 4 + 8192), dtype=np.float32)   # 32 KiB gzip'ed: for its coding
    for md, comp, v in ((None, grpc.Compression.NoCompression, big),
                        (None, grpc.Compression.Gzip, zeros), (bad, grpc.Compression.Gzip, zeros)):
        req = infer_request("alpha", v, name="x")
        e = rpc_error(stub.ModelInfer, req, timeout=10, metadata=md, compression=comp)
        expect(e.code() == grpc.StatusCode.UNAUTHENTICATED and
               "no API key this server knows" in e.details(),
               "a costly message without a known key: %s %r" % (e.code(), e.details()))
    resp = stub.ModelInfer(infer_request("alpha", x, name="x"), timeout=10, metadata=mine,
                           compression=grpc.Compression.Gzip)
    expect(output_of(resp).shape == (1, 3), "a compressed message with the key: an answer")
    ok("UNAUTHENTICATED (none, wrong, and unread when costly), PERMISSION_DENIED (model, "
       "admin call), keys in authorization and x-api-key metadata, values with spaces around "
       "them")


# ---------------------------------------------------------------- limits

def grpc_raw_unary(addr, method, payload, headers, content_type="application/grpc", cut=0,
                   flag=0):
    """A unary call with headers the grpc package will not send (grpc-timeout
    as written, another content-type), or a message `cut` bytes short of
    its declared length, by curl over HTTP/2 prior knowledge
    (scripts/install-deps installs it): the answer's headers and trailers,
    lower-cased names."""
    import struct
    import subprocess
    import tempfile
    with tempfile.NamedTemporaryFile() as f:
        f.write(bytes([flag]) + struct.pack(">I", len(payload)) + payload[:len(payload) - cut])
        f.flush()
        args = ["curl", "-s", "-D", "-", "-o", "/dev/null", "--max-time", "10",
                "--http2-prior-knowledge", "-H", "content-type: " + content_type,
                "-H", "te: trailers"]
        for name, value in headers:
            args += ["-H", "%s: %s" % (name, value)]
        out = subprocess.run(args + ["--data-binary", "@" + f.name,
                                     "http://%s/inference.GRPCInferenceService/%s" % (addr, method)],
                             capture_output=True, text=True, timeout=20).stdout
    got = {}
    for line in out.splitlines():
        if ":" in line and not line.startswith("HTTP/"):
            k, v = line.split(":", 1)
            got[k.strip().lower()] = v.strip()
    return got


def check_limits(a):
    chan = grpc.insecure_channel(a.grpc, options=[("grpc.max_send_message_length", 64 << 20)])
    stub = service_pb2_grpc.GRPCInferenceServiceStub(chan)
    big = np.zeros((64, 40000), dtype=np.float32)   # 10 MB, over max_body_bytes (1 MiB)
    e = rpc_error(stub.ModelInfer, infer_request("digits", big), timeout=30)
    expect(e.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and "max_body_bytes" in e.details(),
           "a message over max_body_bytes: %s %r" % (e.code(), e.details()))
    small = np.zeros((1, 64), dtype=np.float32)
    resp = stub.ModelInfer(infer_request("digits", small), timeout=10)
    expect(output_of(resp).shape == (1, 10), "the connection serves on")
    ok("a message over limits.max_body_bytes: RESOURCE_EXHAUSTED; the next call served")
    # In a stream, a message over the limit behind one still computing: the
    # one taken is answered, then the stream ends RESOURCE_EXHAUSTED (the
    # answer owed was dropped with the stream).
    slow = infer_request("slow", np.ones((1, 4), dtype=np.float32), name="x", id="first")
    over = infer_request("digits", np.zeros((1, 600000), dtype=np.float32), id="over")
    after = infer_request("digits", np.zeros((1, 64), dtype=np.float32), id="after")
    # Declared too big, and (gzip: 2.4 MB of zeros in a few KB) too big
    # once inflated, which was an in-stream error the stream read on past.
    for compression in (None, grpc.Compression.Gzip):
        got, code, details = [], None, ""
        try:
            for resp in stub.ModelStreamInfer(iter([slow, over, after]), timeout=30,
                                              compression=compression):
                got.append((resp.infer_response.id, resp.error_message))
        except grpc.RpcError as e:
            code, details = e.code(), e.details()
        expect(got == [("first", "")] and code == grpc.StatusCode.RESOURCE_EXHAUSTED and
               "max_body_bytes" in details,
               "a stream's message over max_body_bytes (%s) behind one computing: %r %s %r"
               % (compression, got, code, details))
    ok("in a stream, the answers owed come before a message over max_body_bytes ends it, "
       "compressed or not")
    # Metadata over limits.max_header_bytes (4096 here): the HTTP/2 layer's
    # refusal, said as gRPC (it was an HTTP 431, UNKNOWN to the client).
    e = rpc_error(stub.ModelInfer, infer_request("digits", small), timeout=10,
                  metadata=(("x-big", "a" * 5000),))
    expect(e.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and "max_header_bytes" in e.details(),
           "metadata over max_header_bytes: %s %r" % (e.code(), e.details()))
    ok("metadata over limits.max_header_bytes: RESOURCE_EXHAUSTED")
    # A deadline of 0 has passed (it was read as none and the call ran);
    # a codec other than protobuf is not served (it was served as protobuf).
    raw = grpc_raw_unary(a.grpc, "ModelInfer", infer_request("digits", small).SerializeToString(),
                         [("grpc-timeout", "0S")])
    expect(raw.get("grpc-status") == "4", "grpc-timeout 0S: %r" % raw)
    raw = grpc_raw_unary(a.grpc, "ServerLive", b"", [("grpc-timeout", "1x")])
    expect(raw.get("grpc-status") == "13" and "malformed grpc-timeout" in raw.get("grpc-message", ""),
           "a malformed grpc-timeout: %r" % raw)
    raw = grpc_raw_unary(a.grpc, "ServerLive", b"", [], content_type="application/grpc+json")
    expect(raw.get("grpc-status") == "13", "application/grpc+json: %r" % raw)
    raw = grpc_raw_unary(a.grpc, "ServerLive", b"", [("grpc-timeout", "5S")],
                         content_type="application/grpc+proto")
    expect(raw.get("grpc-status") == "0", "application/grpc+proto, grpc-timeout 5S: %r" % raw)
    ok("grpc-timeout 0 is DEADLINE_EXCEEDED, malformed is INTERNAL; +json is not served")
    # An encoding not read: UNIMPLEMENTED, and the answer lists those that
    # are (the compression spec's MUST; no answer said it).
    raw = grpc_raw_unary(a.grpc, "ModelInfer", b"x" * 20, [("grpc-encoding", "snappy")], flag=1)
    expect(raw.get("grpc-status") == "12" and
           set(raw.get("grpc-accept-encoding", "").split(",")) == {"identity", "deflate", "gzip"},
           "grpc-encoding snappy: %r" % raw)
    expect(raw.get("grpc-accept-encoding") == grpc_raw_unary(a.grpc, "ServerLive", b"", []).get(
        "grpc-accept-encoding"), "grpc-accept-encoding on every answer")
    ok("an encoding not read is UNIMPLEMENTED with grpc-accept-encoding")
    # A body that ends inside a message: INTERNAL, as grpc-go and grpc core
    # say an unexpected end of the stream (it was INVALID_ARGUMENT).
    raw = grpc_raw_unary(a.grpc, "ModelInfer", infer_request("digits", small).SerializeToString(),
                         [], cut=10)
    expect(raw.get("grpc-status") == "13" and "cut short" in raw.get("grpc-message", ""),
           "a message cut short: %r" % raw)
    ok("a message cut short is INTERNAL")
    # An answer over the 4 MiB the server buffers for a connection: it
    # stalled until a timer (header_timeout_ms, 10 s) woke the connection,
    # once the client's window was open and it had nothing to send.
    chan = grpc.insecure_channel(a.grpc, options=[("grpc.max_receive_message_length", 64 << 20)])
    stub = service_pb2_grpc.GRPCInferenceServiceStub(chan)
    for rows in (2, 3, 3):
        t0 = time.monotonic()
        resp = stub.ModelInfer(infer_request("bigout", np.ones((rows, 4), dtype=np.float32),
                                             name="x"), timeout=30)
        took = time.monotonic() - t0
        expect(output_of(resp).shape == (rows, 1 << 20), "bigout: shape %r" % (output_of(resp).shape,))
        expect(took < 5, "a %d MiB answer took %.1f s" % (4 * rows, took))
    ok("answers of 8 and 12 MiB arrive without waiting for a timer")
    # Typed contents of packed INT64 zeros: 1 byte a value on the wire, 8
    # once read and 8 more converted. A gzipped message of 60 million of
    # them took the server to 1.5 GB before the handler refused it. Now:
    # past max_body_bytes once converted, or past twice it and 1 MiB once
    # unpacked, RESOURCE_EXHAUSTED, and the next call is served.
    for n, word in ((200000, "become 1600000 bytes"), (1000000, "once read")):
        req = service_pb2.ModelInferRequest(model_name="digits")
        t = req.inputs.add(name="input", datatype="INT64", shape=[1, n])
        t.contents.int64_contents.extend([0] * n)
        e = rpc_error(stub.ModelInfer, req, timeout=30, compression=grpc.Compression.Gzip)
        expect(e.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and word in e.details(),
               "%d INT64 zeros: %s %r" % (n, e.code(), e.details()))
    resp = stub.ModelInfer(infer_request("digits", small), timeout=10)
    expect(output_of(resp).shape == (1, 10), "the server serves on")
    ok("typed contents are bounded once read and once converted")
    # An error quoting a long non-ASCII name is cut at a character: cut
    # inside one, the error_message was not UTF-8, grpcio refused the
    # response and the stream died with it.
    bad = service_pb2.ModelInferRequest(model_name="digits", id="bad")
    t = bad.inputs.add(name="a" + "\u00e9" * 700, datatype="FP32", shape=[1, 64])
    t.contents.fp32_contents.extend([0.0] * 3)
    good = infer_request("digits", small, id="good")
    got = [(r.infer_response.id, r.error_message[:12])
           for r in stub.ModelStreamInfer(iter([bad, good]), timeout=30)]
    expect(got == [("bad", 'input "a' + "\u00e9" * 4), ("good", "")],
           "a long non-ASCII name in a stream's error: %r" % got)
    e = rpc_error(stub.ModelInfer, bad, timeout=10)
    expect(e.code() == grpc.StatusCode.INVALID_ARGUMENT and
           e.details().startswith('input "a\u00e9\u00e9'),
           "the same error, unary: %s %r" % (e.code(), e.details()))
    ok("errors are cut at a character")
    # Metadata naming what describes the HTTP body the call becomes are not
    # passed on as its headers: "inference-header-content-length: 5" was
    # read as the body's and the call refused, blaming an HTTP header.
    resp = stub.ModelInfer(infer_request("digits", small), timeout=10,
                           metadata=(("inference-header-content-length", "5"),
                                     ("content-encoding", "gzip")))
    expect(output_of(resp).shape == (1, 10), "metadata of the HTTP body's names: served")
    ok("metadata named as the HTTP body's headers do not reach it")


# ---------------------------------------------------------------- drain

def check_drain(a):
    """SIGTERM while a 1 s call runs: the call is answered, the server ends.
    Two streams open then, whose client sends nothing more: one idle since
    its answer, one with a message running. Each gets what it asked for and
    then UNAVAILABLE, at once: an idle stream held the drain to
    shutdown_timeout_ms and the server exited 1, "not answered"."""
    import os
    import signal
    stub = service_pb2_grpc.GRPCInferenceServiceStub(grpc.insecure_channel(a.grpc))
    x = np.zeros((1, 4), dtype=np.float32)
    expect(stub.ServerLive(service_pb2.ServerLiveRequest(), timeout=10).live, "live")
    release = threading.Event()

    def one_then_wait(tag):
        yield infer_request("slow", x, name="x", id=tag)
        release.wait(30)

    got = {"idle": [], "busy": []}
    ends = {}

    def read(tag, call):
        try:
            for resp in call:
                got[tag].append(resp)
            ends[tag] = ("ended", None)
        except grpc.RpcError as e:
            ends[tag] = (e.code(), e.details())

    idle = stub.ModelStreamInfer(one_then_wait("idle"), timeout=60)
    t_idle = threading.Thread(target=read, args=("idle", idle))
    t_idle.start()
    deadline = time.monotonic() + 10
    while not got["idle"] and time.monotonic() < deadline:
        time.sleep(0.05)
    expect(len(got["idle"]) == 1, "the idle stream's message answered first: %r" % got)
    f = stub.ModelInfer.future(infer_request("slow", x, name="x"), timeout=30)
    busy = stub.ModelStreamInfer(one_then_wait("busy"), timeout=60)
    t_busy = threading.Thread(target=read, args=("busy", busy))
    t_busy.start()
    # Past 128 messages in flight the stream's body is paused with the
    # rest waiting: such a stream was looked at again only after
    # idle_timeout_ms, and held the drain to its deadline (exit 1).
    got["many"] = []

    def many_then_wait():
        for i in range(150):
            yield infer_request("quick", x, name="x", id="m%d" % i)
        release.wait(30)

    many = stub.ModelStreamInfer(many_then_wait(), timeout=60)
    t_many = threading.Thread(target=read, args=("many", many))
    t_many.start()
    time.sleep(0.3)
    t0 = time.monotonic()
    os.kill(a.pid, signal.SIGTERM)
    resp = f.result()
    expect(output_of(resp).shape == (1, 3), "the call in flight at SIGTERM is answered")
    t_idle.join(10)
    t_busy.join(10)
    t_many.join(10)
    took = time.monotonic() - t0
    release.set()
    expect(len(got["busy"]) == 1 and not got["busy"][0].error_message,
           "the stream's message running at SIGTERM is answered: %r" % got["busy"])
    expect(len(got["many"]) == 150 and not any(r.error_message for r in got["many"]),
           "the stream of 150 messages has all its answers: %d" % len(got["many"]))
    for tag in ("idle", "busy", "many"):
        expect(ends.get(tag, (None,))[0] == grpc.StatusCode.UNAVAILABLE,
               "the %s stream ends UNAVAILABLE at the drain: %r" % (tag, ends.get(tag)))
    expect(took < 5, "the streams end with the drain, not at its deadline: %.1f s" % took)
    ok("SIGTERM while a call runs: it is answered (the connection gets GOAWAY after it); "
       "streams idle, running or past 128 in flight end UNAVAILABLE after their answers, in "
       "%.1f s" % took)


# ---------------------------------------------------------------- idle

def check_idle(a):
    """limits.idle_timeout_ms 1000 and a model whose batch takes 1.5 s: a
    stream waiting for its answer is not idle (it was ended at 1 s, its
    computed answer lost), and its idle clock starts at the answer, not at
    its last message. Past that, idle for the limit, it is ended."""
    stub = service_pb2_grpc.GRPCInferenceServiceStub(grpc.insecure_channel(a.grpc))
    x = np.zeros((1, 4), dtype=np.float32)
    answers = []
    send_second = threading.Event()

    def msgs():
        yield infer_request("slow15", x, name="x", id="first")
        send_second.wait(10)
        time.sleep(0.7)   # 2.2 s after the first message, 0.7 s after its answer
        yield infer_request("slow15", x, name="x", id="second")
        time.sleep(30)    # then idle: ended after 1 s of it

    t0 = time.monotonic()
    call = stub.ModelStreamInfer(msgs(), timeout=60)
    end = None
    try:
        for resp in call:
            answers.append((time.monotonic() - t0, resp.infer_response.id, resp.error_message))
            send_second.set()
    except grpc.RpcError as e:
        end = (time.monotonic() - t0, e.code(), e.details())
    expect([(i, err) for _, i, err in answers] == [("first", ""), ("second", "")],
           "both messages answered: %r, then %r" % (answers, end))
    expect(end is not None and end[1] == grpc.StatusCode.DEADLINE_EXCEEDED and
           "idle" in end[2], "then ended as idle: %r" % (end,))
    idle_for = end[0] - answers[-1][0]
    expect(0.8 < idle_for < 3.0, "idle from its last answer: ended %.2f s after it" % idle_for)
    ok("a stream is not idle while its answer is computed; idle %.2f s after its last answer"
       % idle_for)


# ---------------------------------------------------------------- churn

def check_churn(a):
    """Streams whose client leaves while answers are on their way: half are
    cancelled after their fourth answer, and the connection is closed every
    third stream with answers still running. A send that fails there closes
    the socket at once, from inside the answer's own callback (the use after
    free this case was written for: the server died within 500 streams)."""
    x = np.array([[1, 2, 3, 4]], dtype=np.float32)
    chan = stub = None
    whole = cancelled = 0
    for s in range(a.streams):
        if s % 3 == 0:
            if chan:
                chan.close()
            chan = grpc.insecure_channel(a.grpc)
            stub = service_pb2_grpc.GRPCInferenceServiceStub(chan)
        reqs = [infer_request("churn", x, name="x", id="s%d-%d" % (s, i)) for i in range(8)]
        call = stub.ModelStreamInfer(iter(reqs), timeout=30)
        cancel = s % 2 == 1
        got = 0
        try:
            for resp in call:
                expect(not resp.error_message, "stream %d: %s" % (s, resp.error_message))
                got += 1
                if cancel and got >= 4:
                    call.cancel()
                    break
        except grpc.RpcError as e:
            expect(e.code() == grpc.StatusCode.CANCELLED, "stream %d: %s" % (s, e.code()))
        if cancel:
            cancelled += 1
        else:
            expect(got == 8, "stream %d: %d answers of 8" % (s, got))
            whole += 1
    chan.close()
    live = service_pb2_grpc.GRPCInferenceServiceStub(grpc.insecure_channel(a.grpc))
    expect(live.ServerLive(service_pb2.ServerLiveRequest(), timeout=10).live, "live after")
    ok("%d streams whole, %d cancelled, a connection closed every third: the server lives"
       % (whole, cancelled))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--grpc", required=True)
    ap.add_argument("--http", required=True)
    ap.add_argument("--case", required=True,
                    choices=("surface", "auth", "limits", "drain", "churn", "idle"))
    ap.add_argument("--streams", type=int, default=1500)
    ap.add_argument("--pid", type=int, default=0)
    ap.add_argument("--override", default="{}")
    ap.add_argument("--key", default="")
    ap.add_argument("--other-key", default="")
    a = ap.parse_args()
    try:
        {"surface": check_surface, "auth": check_auth, "limits": check_limits,
         "drain": check_drain, "churn": check_churn, "idle": check_idle}[a.case](a)
    except (CheckFailed, InferenceServerException, grpc.RpcError) as e:
        print("FAIL: %s" % (e,), flush=True)
        sys.exit(1)


if __name__ == "__main__":
    main()
