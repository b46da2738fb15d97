#!/usr/bin/env python3
"""Writes the seed corpora of tests/fuzz/corpus/ (docs/FUZZING.md).

Each seed is a small, meaningful input: a valid request of each kind, the
pipelining, chunking and 100-continue cases, each limit, the binary tensor
extension; the committed safetensors test files and real config.json files.
Run it from anywhere; it rewrites the corpus folders it owns:

    python3 tests/fuzz/make_seeds.py

The fuzzers never write here: `make fuzz` runs on a copy in a temp dir.
"""
import json
import os
import shutil
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
CORPUS = os.path.join(HERE, "corpus")

# ---- fuzz_http_conn: byte 0 flags, bytes 1-2 cut points (k/255), then the client's bytes
HALF_CLOSE, DRAIN, ABORT_ANSWERS, SLOW_READER, NO_READ = 1, 2, 4, 8, 16


def http(flags, req, cut1=85, cut2=170):
    if isinstance(req, str):
        req = req.encode()
    return bytes([flags, cut1, cut2]) + req


def cut_at(req, marker):
    """Cut points that put the first write's end right after `marker`."""
    if isinstance(req, str):
        req = req.encode()
    i = req.index(marker.encode()) + len(marker)
    k = min(255, max(0, (i * 255 + len(req) - 1) // len(req)))
    return k


H = "Host: gw\r\n"
live = "GET /v2/health/live HTTP/1.1\r\n" + H + "\r\n"
model = "GET /v2/models/digits HTTP/1.1\r\n" + H + "\r\n"
echo_body = '{"inputs":[{"name":"input","shape":[1,2],"datatype":"FP32","data":[1,2]}]}'
echo = ("POST /v2/models/digits/infer HTTP/1.1\r\n" + H +
        "Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(echo_body), echo_body))
deferred = ("POST /v2/models/digits/versions/3/infer HTTP/1.1\r\n" + H +
            "Content-Length: 2\r\n\r\n{}")
deferred1 = deferred.replace("/3/", "/1/")
chunked = ("POST /v2/models/digits/infer HTTP/1.1\r\n" + H +
           "Transfer-Encoding: chunked\r\n\r\n"
           "5\r\nhello\r\n6;ext=1\r\n world\r\n0\r\nX-Trailer: t\r\n\r\n")
expect = ("POST /v2/models/digits/infer HTTP/1.1\r\n" + H +
          "Expect: 100-continue\r\nContent-Length: 11\r\n\r\nhello world")
bin_json = b'{"inputs":[{"name":"input","shape":[1,2],"datatype":"FP32","parameters":{"binary_data_size":8}}]}'
binary = (("POST /v2/models/digits/infer HTTP/1.1\r\n" + H +
           "Content-Type: application/octet-stream\r\nInference-Header-Content-Length: %d\r\n"
           "Content-Length: %d\r\n\r\n" % (len(bin_json), len(bin_json) + 8)).encode() +
          bin_json + struct.pack("<2f", 1.0, 2.0))
big_header = "GET /v2/health/live HTTP/1.1\r\n" + H + "X-Big: " + "a" * 4200 + "\r\n\r\n"
big_body = ("POST /v2/models/digits/infer HTTP/1.1\r\n" + H + "Content-Length: 100000\r\n\r\nabc")
big_chunk = ("POST /v2/models/digits/infer HTTP/1.1\r\n" + H +
             "Transfer-Encoding: chunked\r\n\r\n10001\r\n" + "z" * 600)
smuggle = ("POST /v2/models/digits/infer HTTP/1.1\r\n" + H +
           "Content-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n")
stream_chunked = ("POST /stream/echo HTTP/1.1\r\n" + H + "Transfer-Encoding: chunked\r\n\r\n"
                  "4\r\nabcd\r\n3\r\nefg\r\n0\r\n\r\n")
stream_len = ("PUT /stream/len HTTP/1.1\r\n" + H + "Content-Length: 12\r\n\r\nhello stream")
HTTP_SEEDS = {
    "get_live": http(0, live),
    "get_model_http10": http(0, "GET /v2/models/m1 HTTP/1.0\r\n\r\n"),
    "get_model_http10_keepalive": http(0, "GET /v2/models/m1 HTTP/1.0\r\nConnection: keep-alive\r\n\r\n" + live),
    "head_model": http(0, "HEAD /v2/models/x HTTP/1.1\r\n" + H + "\r\n"),
    "post_echo": http(0, echo),
    "pipelined": http(0, live + model + echo + live),
    "pipelined_out_of_order": http(0, deferred + live + deferred1 + echo + model),
    "pipelined_close_midway": http(0, live + "GET /v2/health/live HTTP/1.1\r\n" + H +
                                   "Connection: close\r\n\r\n" + model),
    "chunked": http(0, chunked),
    "chunked_split": http(0, chunked, 100, 200),
    "expect_continue": http(0, expect, cut_at(expect, "\r\n\r\n"), 250),
    "expect_continue_deferred": http(0, expect.replace("/digits/infer", "/digits/versions/2/infer"),
                                     cut_at(expect, "\r\n\r\n"), 250),
    "expect_bad": http(0, "POST /v2/models/d/infer HTTP/1.1\r\n" + H +
                       "Expect: 200-ok\r\nContent-Length: 1\r\n\r\nx"),
    "binary_extension": http(0, binary),
    "method_not_allowed": http(0, "DELETE /v2/models/x HTTP/1.1\r\n" + H + "\r\n"),
    "not_found": http(0, "GET /nowhere/at/all?x=1 HTTP/1.1\r\n" + H + "\r\n"),
    "queue_full": http(0, "PUT /v2/repository/models/m/load HTTP/1.1\r\n" + H +
                       "Content-Length: 0\r\n\r\n"),
    "query_and_header": http(0, "GET /q?timeout=5&a=%20b HTTP/1.1\r\n" + H +
                             "X-Request-Timeout-Ms: 250\r\n\r\n"
                             "OPTIONS /q HTTP/1.1\r\n" + H + "\r\n"),
    "header_too_large": http(0, big_header),
    "body_too_large_declared": http(0, big_body),
    "body_too_large_chunked": http(0, big_chunk),
    "missing_host": http(0, "GET /v2/health/live HTTP/1.1\r\n\r\n"),
    "two_hosts": http(0, "GET /v2/health/live HTTP/1.1\r\n" + H + H + "\r\n"),
    "http2_version": http(0, "GET /v2/health/live HTTP/2.0\r\n" + H + "\r\n"),
    "malformed_header": http(0, "GET /v2/health/live HTTP/1.1\r\nBad Header: x\r\n\r\n"),
    "cl_and_te": http(0, smuggle),
    "upgrade": http(0, "GET /v2/health/live HTTP/1.1\r\n" + H +
                    "Connection: Upgrade\r\nUpgrade: websocket\r\n\r\nrest-of-stream"),
    "leading_crlf": http(0, "\r\n\r\n" + live),
    "drain_pipelined": http(DRAIN, live + deferred + model + live, 40, 200),
    "drain_partial": http(DRAIN, live + "GET /v2/models/x HT", 255, 255),
    "half_close_partial": http(HALF_CLOSE, live + "POST /v2/models/d/infer HTTP/1.1\r\n" + H +
                               "Content-Length: 10\r\n\r\nabc"),
    "half_close_deferred": http(HALF_CLOSE, deferred + deferred1),
    "client_leaves_deferred": http(NO_READ, deferred + deferred + live),
    "client_leaves_abort_answers": http(NO_READ | ABORT_ANSWERS, deferred + live + deferred1),
    "stream_chunked": http(0, stream_chunked, 60, 120),
    "stream_length": http(0, stream_len + live),
    "stream_late": http(0, stream_len.replace("/len", "/late") + model),
    "stream_reject": http(0, stream_len.replace("/len", "/reject") + live),
    "stream_http10": http(0, "POST /stream/x HTTP/1.0\r\nContent-Length: 3\r\n\r\nabc"),
    "stream_head": http(0, "HEAD /stream/x HTTP/1.1\r\n" + H + "\r\n"),
    "stream_big_slow_reader": http(SLOW_READER, "POST /stream/big HTTP/1.1\r\n" + H +
                                   "Content-Length: 50000\r\n\r\n" + "s" * 50000 + live),
    "stream_cut_short": http(HALF_CLOSE, "POST /stream/x HTTP/1.1\r\n" + H +
                             "Transfer-Encoding: chunked\r\n\r\n5\r\nab"),
    "stream_bad_chunk": http(0, "POST /stream/x HTTP/1.1\r\n" + H +
                             "Transfer-Encoding: chunked\r\n\r\n3\r\nabc\r\nzz\r\n"),
    "stream_client_leaves": http(NO_READ, stream_chunked.replace("0\r\n\r\n", "")),
    "stream_after_deferred": http(0, deferred + stream_chunked + live),
    "slow_reader_big_echo": http(SLOW_READER, ("POST /v2/models/d/infer HTTP/1.1\r\n" + H +
                                               "Content-Length: 30000\r\n\r\n" + "e" * 30000) * 2),
}

# ---- fuzz_tensor_json: byte 0 = decoder | spec << 2, bytes 1-2 = JSON length (LE16, 0xffff: none)
KSERVE, BINARY, TFS, ALL = 0, 1, 2, 3
DIGITS, M, ONE, CUBE = 0, 1, 2, 3


def tj(decoder, spec, body, json_len=None):
    if isinstance(body, str):
        body = body.encode()
    n = 0xffff if json_len is None else json_len
    return bytes([decoder | spec << 2]) + struct.pack("<H", n) + body


def kserve(name, shape, data, **extra):
    req = {"inputs": [{"name": name, "shape": shape, "datatype": "FP32", "data": data}]}
    req.update(extra)
    return json.dumps(req)


def binary_req(name, shape, values, **extra):
    req = {"inputs": [{"name": name, "shape": shape, "datatype": "FP32",
                       "parameters": {"binary_data_size": 4 * len(values)}}]}
    req.update(extra)
    head = json.dumps(req).encode()
    return head, head + struct.pack("<%df" % len(values), *values)


m_bin_head, m_bin = binary_req("x", [2, 2, 3], [float(i) for i in range(12)],
                               outputs=[{"name": "y", "parameters": {"binary_data": True}}])
d_bin_head, d_bin = binary_req("input", [1, 64], [0.5] * 64, id="req-1")
TENSOR_SEEDS = {
    "kserve_digits": tj(KSERVE, DIGITS, kserve("input", [1, 64], [0.25] * 64, id="a\"b",
                                               parameters={"priority": 2, "timeout": 50000})),
    "kserve_m_nested": tj(KSERVE, M, kserve("x", [2, 2, 3], [[[1, 2, 3], [4, 5, 6]],
                                                            [[7, 8, 9], [1e-3, -2.5e10, 0]]],
                                            outputs=[{"name": "y"}])),
    "kserve_m_binary_out": tj(KSERVE, M, kserve("x", [1, 2, 3], [1, 2, 3, 4, 5, 6],
                                                parameters={"binary_data_output": True})),
    "kserve_one": tj(KSERVE, ONE, kserve("in", [1, 1], [3.5])),
    "kserve_cube": tj(ALL, CUBE, kserve("input", [2, 2, 2, 2], list(range(16)))),
    "kserve_bad_shape": tj(KSERVE, M, kserve("x", [1, 3, 2], [1, 2, 3, 4, 5, 6])),
    "kserve_too_many_rows": tj(KSERVE, ONE, kserve("in", [2, 1], [1, 2])),
    "kserve_duplicate_key": tj(KSERVE, ONE, '{"inputs":[],"inputs":[]}'),
    "binary_m": tj(BINARY, M, m_bin, len(m_bin_head)),
    "binary_digits": tj(BINARY, DIGITS, d_bin, len(d_bin_head)),
    "binary_trailing_bytes": tj(BINARY, M, m_bin + b"\0\0\0\0", len(m_bin_head)),
    "binary_short": tj(BINARY, M, m_bin[:-5], len(m_bin_head)),
    "binary_len_past_body": tj(BINARY, ONE, '{"inputs":[]}', 4000),
    "tfs_rows": tj(TFS, M, json.dumps({"instances": [[[1, 2, 3], [4, 5, 6]], [[0, 0, 0], [1, 1, 1]]]})),
    "tfs_named": tj(TFS, DIGITS, json.dumps({"instances": [{"input": [0.5] * 64}]})),
    "tfs_bad_row": tj(TFS, ONE, json.dumps({"instances": [[1, 2]]})),
    "all_three_digits": tj(ALL, DIGITS, kserve("input", [1, 64], [1] * 64), 10),
}


# ---- fuzz_embed_json: byte 0 = path | (max_seq - 2) << 3, bytes 1-2 = LE16 (JSON length / limit)
OPENAI, TEI, KS_JSON, KS_BIN, MODEL_NAME, INFLATE = 0, 1, 2, 3, 4, 5


def ej(path, body, max_seq=8, n=0xffff):
    if isinstance(body, str):
        body = body.encode()
    return bytes([path | (max_seq - 2) << 3]) + struct.pack("<H", n) + body


def bytes_req(texts):
    elems = b"".join(struct.pack("<I", len(t)) + t for t in texts)
    head = json.dumps({"inputs": [{"name": "text", "datatype": "BYTES", "shape": [len(texts)],
                                   "parameters": {"binary_data_size": len(elems)}}]}).encode()
    return head, head + elems


kb_head, kb = bytes_req([b"hello world", "caf\u00e9 \u5317\u4eac".encode(), b""])
EMBED_SEEDS = {
    "openai_list": ej(OPENAI, json.dumps({"model": "enc", "input": ["hello world", "play-ing!"],
                                          "encoding_format": "base64"})),
    "openai_ids": ej(OPENAI, json.dumps({"model": "enc", "input": [[2, 5, 6, 3], [7]],
                                         "dimensions": 4, "truncate": False})),
    "openai_one_long": ej(OPENAI, json.dumps({"model": "enc", "input": "hello " * 20}), 3),
    "tei": ej(TEI, json.dumps({"inputs": ["a b", "unbelievable naive"], "normalize": False})),
    "kserve_json": ej(KS_JSON, json.dumps({"inputs": [{"name": "text", "datatype": "BYTES",
                                                       "shape": [2, 1],
                                                       "data": [["[MASK] x"], ["\u0000\u00e9"]]}],
                                           "parameters": {"truncate": True}})),
    "kserve_binary": ej(KS_BIN, kb, 9, len(kb_head)),
    "model_name": ej(MODEL_NAME, '{"model": "enc", "input": "x"}'),
    "inflate_gzip": ej(INFLATE, b"gzip\0" + __import__("gzip").compress(b'{"a": 1}' * 20), 8, 4),
    "inflate_deflate": ej(INFLATE, b"deflate\0" + __import__("zlib").compress(b"x" * 300), 8, 1),
}


def write(target, seeds):
    d = os.path.join(CORPUS, target)
    os.makedirs(d, exist_ok=True)
    for name, data in seeds.items():
        with open(os.path.join(d, name), "wb") as f:
            f.write(data)


def copy(target, files):
    d = os.path.join(CORPUS, target)
    os.makedirs(d, exist_ok=True)
    for name, src in files.items():
        shutil.copyfile(os.path.join(ROOT, src), os.path.join(d, name))


IO = {"inputs": [{"name": "input", "datatype": "FP32", "shape": [4]}],
      "outputs": [{"name": "output", "shape": [2, 2]}]}
CONFIGS = {
    "synthetic": dict(name="syn", backend="synthetic", **IO,
                      batching={"max_batch_size": 8, "preferred_batch_sizes": [4, 8],
                                "policy": "fixed_delay", "default_priority": 2,
                                "priority_aging_ms": 0},
                      synthetic={"base_us": 100, "per_row_us": 5, "mode": "spin"}),
    "upstream": dict(backend="upstream", **IO,
                     upstream={"urls": ["http://127.0.0.1:8501", "http://[::1]:9000/"],
                               "protocol": "tfserving", "model": "up", "max_inflight": 2,
                               "timeout_ms": 500}),
    "cuda_devices": dict(name="digits", backend="cuda", platform="x", **IO,
                         layers=[{"type": "dense", "weight": "w", "activation": "gelu"},
                                 {"type": "softmax"}],
                         instances={"count": 2, "devices": [0, 1]}),
    "bad_unknown_field": dict(name="digits", backend="cpu", oops=1, **IO),
}


def main():
    write("fuzz_http_conn", HTTP_SEEDS)
    write("fuzz_tensor_json", TENSOR_SEEDS)
    write("fuzz_embed_json", EMBED_SEEDS)
    st = {"digits_model.safetensors": "models/digits/model.safetensors"}
    data_dir = os.path.join(ROOT, "tests/data/safetensors")
    for f in sorted(os.listdir(data_dir)):
        if f.endswith(".safetensors"):
            st[f] = os.path.join("tests/data/safetensors", f)
    copy("fuzz_safetensors", st)
    copy("fuzz_model_config", {"digits.json": "models/digits/config.json"})
    write("fuzz_model_config", {k + ".json": json.dumps(v, indent=1).encode()
                                for k, v in CONFIGS.items()})


if __name__ == "__main__":
    main()
