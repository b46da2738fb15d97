"""tritonclient_calls.py - Triton's own Python client (tritonclient.http,
unmodified) against a running batchgate. Not a test module: it needs
tritonclient and numpy, so it runs under the interpreter of the virtual
environment that scripts/fetch-testdeps makes, started by
test_tritonclient.py, which owns the server and the repository:

    VENV/bin/python tritonclient_calls.py --url 127.0.0.1:PORT \\
        --eager NAME --lazy NAME --override 'CONFIG_JSON' --unknown NAME

--eager names a READY model, --lazy one not loaded yet; --override is a
config.json (batchgate's format) for --eager whose batching.max_batch_size
differs from the file's. Each check prints "ok: ..." as it passes; the first
that fails prints "FAIL: ..." with the reason and exits 1, so the test's
output names the call that broke. Every wait is bounded."""

import argparse
import json
import sys
import time

import numpy as np
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException


class CheckFailed(Exception):
    pass


def expect(cond, what):
    if not cond:
        raise CheckFailed(what)


def repo_index(client):
    """{name: row} of get_model_repository_index."""
    rows = client.get_model_repository_index()
    expect(isinstance(rows, list), "get_model_repository_index: expected a list, got %r" % (rows,))
    return {row["name"]: row for row in rows}


def wait_state(client, name, states, timeout=10.0):
    """Polls the index until `name` is in one of `states`; returns its row."""
    end = time.monotonic() + timeout
    while True:
        row = repo_index(client).get(name)
        if row is not None and row.get("state") in states:
            return row
        if time.monotonic() >= end:
            raise CheckFailed("%s never reached %s within %.0f s; last row: %r"
                              % (name, "/".join(states), timeout, row))
        time.sleep(0.05)


def check_health(client, a):
    expect(client.is_server_live() is True, "is_server_live() is not True")
    expect(client.is_server_ready() is True, "is_server_ready() is not True")
    return "is_server_live, is_server_ready"


def check_index(client, a):
    rows = repo_index(client)
    for name in (a.eager, a.lazy):
        expect(name in rows, "index lacks %s: %r" % (name, rows))
    expect(rows[a.eager].get("state") == "READY", "eager model not READY: %r" % rows[a.eager])
    lazy = rows[a.lazy]
    expect(lazy.get("state") == "UNAVAILABLE", "lazy model not UNAVAILABLE: %r" % lazy)
    expect(lazy.get("reason"), "lazy model UNAVAILABLE without a reason: %r" % lazy)
    return "get_model_repository_index: %s READY, %s UNAVAILABLE (%s)" % (
        a.eager, a.lazy, lazy["reason"])


def check_unload(client, a):
    client.unload_model(a.eager)
    row = wait_state(client, a.eager, ("UNAVAILABLE",))
    expect(not client.is_model_ready(a.eager), "is_model_ready after the unload")
    return "unload_model: %s UNAVAILABLE (%s)" % (a.eager, row.get("reason"))


def check_load(client, a):
    client.load_model(a.eager)
    # The load answers once loaded: READY at once, no polling.
    expect(repo_index(client)[a.eager].get("state") == "READY",
           "not READY right after load_model: %r" % repo_index(client)[a.eager])
    expect(client.is_model_ready(a.eager), "is_model_ready is False after load_model")
    return "load_model: %s READY" % a.eager


def check_load_with_config(client, a):
    want = json.loads(a.override)["batching"]["max_batch_size"]
    before = client.get_model_config(a.eager).get("max_batch_size")
    expect(before != want, "the override must change max_batch_size (both %r)" % want)
    client.load_model(a.eager, config=a.override)
    got = client.get_model_config(a.eager).get("max_batch_size")
    expect(got == want, "get_model_config max_batch_size %r after load_model(config=...), "
           "expected %r" % (got, want))
    return "load_model(config=...): max_batch_size %r -> %r" % (before, got)


def check_infer_lazy(client, a):
    x = np.array([[1.0, 2.0, 3.0, 4.0]], dtype=np.float32)
    inp = httpclient.InferInput("x", list(x.shape), "FP32")
    inp.set_data_from_numpy(x)
    result = client.infer(a.lazy, [inp], outputs=[httpclient.InferRequestedOutput("y")])
    y = result.as_numpy("y")
    expect(y is not None, "infer answered no output y: %r" % result.get_response())
    expect(y.shape == (1, 3), "y has shape %r, expected (1, 3)" % (y.shape,))
    expect(y.dtype == np.float32, "y has dtype %s, expected float32" % y.dtype)
    row = repo_index(client)[a.lazy]
    expect(row.get("state") == "READY", "lazy model not READY after its first infer: %r" % row)
    return "infer on %s (lazy load): y %s %s" % (a.lazy, y.shape, y.tolist())


def check_compressed_requests(client, a):
    """request_compression_algorithm: the body goes out with Content-Encoding."""
    x = np.array([[1.0, 2.0, 3.0, 4.0], [0.5, -1.0, 2.0, 0.0]], dtype=np.float32)
    got = {}
    for alg in (None, "gzip", "deflate"):
        inp = httpclient.InferInput("x", list(x.shape), "FP32")
        inp.set_data_from_numpy(x, binary_data=alg != "deflate")
        result = client.infer(a.lazy, [inp], outputs=[httpclient.InferRequestedOutput("y")],
                              request_compression_algorithm=alg)
        got[alg] = result.as_numpy("y")
        expect(got[alg] is not None and got[alg].shape == (2, 3),
               "infer with %s answered %r" % (alg, result.get_response()))
    for alg in ("gzip", "deflate"):
        expect(np.array_equal(got[alg], got[None]), "%s-compressed infer gave %r, plain %r"
               % (alg, got[alg].tolist(), got[None].tolist()))
    return "infer with request_compression_algorithm gzip and deflate: same y as plain"


def check_compressed_answers(client, a):
    """response_compression_algorithm: the client asks for the answer
    compressed (Accept-Encoding) and reads it; a JSON answer of a few KiB,
    over compression.min_bytes (test_compression.py checks the wire)."""
    x = np.arange(32, dtype=np.float32).reshape(8, 4)
    got = {}
    for alg in (None, "gzip", "deflate"):
        inp = httpclient.InferInput("x", list(x.shape), "FP32")
        inp.set_data_from_numpy(x)
        result = client.infer(a.wide, [inp],
                              outputs=[httpclient.InferRequestedOutput("y", binary_data=False)],
                              response_compression_algorithm=alg)
        got[alg] = result.as_numpy("y")
        expect(got[alg] is not None and got[alg].shape == (8, 200),
               "infer asking %s answered %r" % (alg, result.get_response()))
    for alg in ("gzip", "deflate"):
        expect(np.array_equal(got[alg], got[None]), "%s-compressed answer gave %r, plain %r"
               % (alg, got[alg].tolist(), got[None].tolist()))
    return "infer with response_compression_algorithm gzip and deflate: same y as plain"


def check_statistics_and_logging(client, a):
    stats = client.get_inference_statistics()   # every model: GET /v2/models/stats
    names = sorted(m["name"] for m in stats["model_stats"])
    expect(a.eager in names and a.lazy in names, "all-model statistics name %r" % names)
    before = client.get_log_settings()
    expect(before.get("log_verbose_level") == 0 and before.get("log_info") is True,
           "get_log_settings answered %r" % before)
    after = client.update_log_settings({"log_verbose_level": 1})
    expect(after.get("log_verbose_level") == 1, "update_log_settings answered %r" % after)
    back = client.update_log_settings({"log_verbose_level": 0})
    expect(back.get("log_verbose_level") == 0, "update_log_settings answered %r" % back)
    return "get_inference_statistics(): %d models; log settings verbose 0 -> 1 -> 0" % len(names)


def _infer_x(client, name, **out_kw):
    """One row of x to `name` (input x [-1, 4], output y), x binary."""
    x = np.array([[1.0, 2.0, 3.0, 4.0]], dtype=np.float32)
    inp = httpclient.InferInput("x", list(x.shape), "FP32")
    inp.set_data_from_numpy(x, binary_data=True)
    return client.infer(name, [inp], outputs=[httpclient.InferRequestedOutput("y", **out_kw)])


def _answers(call):
    """Whether a call of the client succeeds (an extension's route exists and works)."""
    try:
        call()
        return True
    except InferenceServerException:
        return False


# Every extension name Triton lists, with a probe of whether batchgate serves
# it; None for those no single call shows (never to be listed here: batchgate
# has no sequence batcher, no scheduling policies, no per-request parameters
# passed to models, no dependent models).
EXTENSION_PROBES = {
    "binary_tensor_data": lambda c, a: _infer_x(c, a.lazy, binary_data=True)
    .as_numpy("y") is not None,
    "classification": lambda c, a: _infer_x(c, a.lazy, class_count=1)
    .as_numpy("y").dtype == np.object_,
    "model_configuration": lambda c, a: c.get_model_config(a.eager).get("name") == a.eager,
    "statistics": lambda c, a: "model_stats" in c.get_inference_statistics(a.eager),
    "model_repository": lambda c, a: _answers(c.get_model_repository_index),
    "logging": lambda c, a: _answers(c.get_log_settings),
    "system_shared_memory": lambda c, a: _answers(c.get_system_shared_memory_status),
    # Its status and unregister answer (perf_analyzer calls them at start
    # and exit); whether a region registers is what says it works.
    "cuda_shared_memory": lambda c, a: _answers(
        lambda: c.register_cuda_shared_memory("probe", b"AAAA", 0, 4)),
    "trace": lambda c, a: _answers(c.get_trace_settings),
    "sequence": None,
    "schedule_policy": None,
    "parameters": None,
    "model_repository(unload_dependents)": None,
}


def check_extensions(client, a):
    """GET /v2 lists exactly the extensions that work (SPEC.md "Triton's tools")."""
    listed = client.get_server_metadata().get("extensions")
    expect(isinstance(listed, list) and len(set(listed)) == len(listed),
           "extensions: expected a list without repeats, got %r" % (listed,))
    unknown = sorted(set(listed) - set(EXTENSION_PROBES))
    expect(not unknown, "extensions lists names Triton does not have: %r" % unknown)
    working = set()
    for name, probe in EXTENSION_PROBES.items():
        if probe is None:
            continue
        try:
            ok = probe(client, a)
        except (InferenceServerException, AttributeError, TypeError, ValueError):
            ok = False
        if ok:
            working.add(name)
    expect(set(listed) == working, "extensions lists %r; the probes find working %r"
           % (sorted(listed), sorted(working)))
    return "extensions %s, each probed working; the others probed absent" % sorted(listed)


def check_unknown(client, a):
    try:
        client.load_model(a.unknown)
    except InferenceServerException as e:
        return "load_model(%s) raised InferenceServerException: %s" % (a.unknown, e)
    raise CheckFailed("load_model(%s) of an unknown model did not raise" % a.unknown)


CHECKS = [check_health, check_index, check_unload, check_load, check_load_with_config,
          check_infer_lazy, check_compressed_requests, check_compressed_answers,
          check_statistics_and_logging,
          check_extensions, check_unknown]


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--url", required=True, help="HOST:PORT of batchgate")
    p.add_argument("--eager", required=True)
    p.add_argument("--lazy", required=True)
    p.add_argument("--wide", required=True, help="a model of 200 outputs a row")
    p.add_argument("--override", required=True, help="config.json for --eager")
    p.add_argument("--unknown", default="no_such_model")
    a = p.parse_args()
    client = httpclient.InferenceServerClient(url=a.url, connection_timeout=10.0,
                                              network_timeout=30.0)
    try:
        for check in CHECKS:
            try:
                print("ok: " + check(client, a), flush=True)
            except (CheckFailed, InferenceServerException) as e:
                print("FAIL: %s: %s: %s" % (check.__name__, type(e).__name__, e), flush=True)
                return 1
    finally:
        client.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
