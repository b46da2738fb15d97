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
d_cls_head, d_cls = binary_req("input", [2, 64], [0.5] * 64 + [0.0] * 64,
                               outputs=[{"name": "output",
                                         "parameters": {"binary_data": True,
                                                        "classification": 10}}])
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
    # Triton's classification extension: top-k as BYTES, digits with labels.
    "kserve_digits_classes": tj(KSERVE, DIGITS, kserve(
        "input", [2, 64], [0.25] * 128,
        outputs=[{"name": "output", "parameters": {"classification": 3}}])),
    "binary_digits_classes": tj(BINARY, DIGITS, d_cls, len(d_cls_head)),
    "kserve_cube_classes_all": tj(ALL, CUBE, kserve(
        "input", [1, 2, 2, 2], list(range(8)),
        outputs=[{"name": "output", "parameters": {"classification": 3}}]), 0),
    "kserve_m_classes_too_many": tj(KSERVE, M, kserve(
        "x", [1, 2, 3], [1, 2, 3, 4, 5, 6],
        outputs=[{"name": "y", "parameters": {"classification": 3}}])),
    "kserve_one_classes_string": tj(KSERVE, ONE, kserve(
        "in", [1, 1], [3.5], outputs=[{"name": "out", "parameters": {"classification": "1"}}])),
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
    "inflate_gzip": ej(INFLATE, b"gzip\0" + __import__("gzip").compress(b'{"a": 1}' * 20, mtime=0), 8, 4),
    "inflate_deflate": ej(INFLATE, b"deflate\0" + __import__("zlib").compress(b"x" * 300), 8, 1),
}


# ---- fuzz_h2: byte 0 flags, byte 1 cut point (k/255), then the client's frames
# (after the preface the harness sends, unless H2_RAW)
H2_RAW, H2_HALF_CLOSE, H2_DRAIN, H2_ABORT_ANSWERS, H2_NO_READ, H2_SEND_FAILS = 1, 2, 4, 8, 16, 32
H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, PRIORITY, RST_STREAM, SETTINGS, PUSH_PROMISE, PING, GOAWAY, WINDOW_UPDATE, \
    CONTINUATION = range(10)
END_STREAM, ACK, END_HEADERS, PADDED, PRIO = 1, 1, 4, 8, 0x20
CANCEL, NO_ERROR = 8, 0


def frame(ftype, flags, sid, payload=b""):
    return struct.pack(">I", len(payload))[1:] + bytes([ftype, flags]) + struct.pack(">I", sid) + payload


def hpack_int(v, prefix, first=0):
    """RFC 7541 5.1: v in a `prefix`-bit prefix, `first` the byte's other bits."""
    top = (1 << prefix) - 1
    if v < top:
        return bytes([first | v])
    out = [first | top]
    v -= top
    while v >= 128:
        out.append(v % 128 + 128)
        v //= 128
    return bytes(out + [v])


def hpack_str(s):
    if isinstance(s, str):
        s = s.encode()
    return hpack_int(len(s), 7) + s   # no Huffman


def literal(name, value, indexing=False):
    """A literal header with a new name: without indexing (0x00) or with
    incremental indexing (0x40)."""
    return bytes([0x40 if indexing else 0x00]) + hpack_str(name) + hpack_str(value)


def grpc_headers(path, extra=(), method="POST"):
    block = (literal(":method", method) + literal(":scheme", "http") + literal(":path", path) +
             literal(":authority", "gw:8001") + literal("content-type", "application/grpc") +
             literal("te", "trailers"))
    for k, v in extra:
        block += literal(k, v)
    return block


def grpc_msg(body=b""):
    return b"\0" + struct.pack(">I", len(body)) + body


SVC = "/inference.GRPCInferenceService/"
SETTINGS0 = frame(SETTINGS, 0, 0)
SETTINGS_ACK = frame(SETTINGS, ACK, 0)


def settings(*pairs):
    return frame(SETTINGS, 0, 0, b"".join(struct.pack(">HI", k, v) for k, v in pairs))


def unary(sid, call, body=b"", extra=()):
    return (frame(HEADERS, END_HEADERS, sid, grpc_headers(SVC + call, extra)) +
            frame(DATA, END_STREAM, sid, grpc_msg(body)))


def h2(flags, frames, cut=128):
    return bytes([flags, cut]) + frames


def h2_split(flags, first, rest):
    """The harness's first write ends right after `first` (or a byte past)."""
    n = len(first) + len(rest)
    return h2(flags, first + rest, min(255, (len(first) * 255 + n - 1) // n))


def rst(sid, code=CANCEL):
    return frame(RST_STREAM, 0, sid, struct.pack(">I", code))


def window_update(sid, n):
    return frame(WINDOW_UPDATE, 0, sid, struct.pack(">I", n))


def ping(data=b"12345678", flags=0):
    return frame(PING, flags, 0, data)


def goaway(last, code=NO_ERROR, debug=b""):
    return frame(GOAWAY, 0, 0, struct.pack(">II", last, code) + debug)


live_hdrs = grpc_headers(SVC + "ServerLive")
infer_body = b"\x0a\x06digits" + b"\x2a\x05\x0a\x01x\x12\x00"   # model_name, an input
H2_SEEDS = {
    "live": h2(0, SETTINGS0 + SETTINGS_ACK + unary(1, "ServerLive")),
    "live_then_ping": h2(0, SETTINGS0 + unary(1, "ServerLive") + ping()),
    # Answered at the end of the headers; the body follows the answer.
    "ready_before_body": h2(0, SETTINGS0 + unary(1, "ServerReady") + unary(3, "ModelReady")),
    # Answered from a timer, 0-3 passes later (path length & 3); several at once.
    "infer_deferred": h2(0, SETTINGS0 + unary(1, "ModelInfer", infer_body) +
                         unary(3, "ModelInfer", b"x" * 40) + unary(5, "ServerLive")),
    "infer_split_data": h2(0, SETTINGS0 +
                           frame(HEADERS, END_HEADERS, 1, grpc_headers(SVC + "ModelInfer")) +
                           frame(DATA, 0, 1, grpc_msg(infer_body)[:7]) +
                           frame(DATA, END_STREAM, 1, grpc_msg(infer_body)[7:]), 60),
    # The client resets a stream whose answer is still to come.
    "infer_reset_before_answer": h2(0, SETTINGS0 + unary(1, "ModelInfer", infer_body) + rst(1)),
    "infer_reset_abort_answers": h2(H2_ABORT_ANSWERS, SETTINGS0 +
                                    unary(1, "ModelInfer", infer_body) + rst(1)),
    "reset_mid_body": h2(0, SETTINGS0 + frame(HEADERS, END_HEADERS, 1, live_hdrs) +
                         frame(DATA, 0, 1, b"\0\0\0") + rst(1)),
    "metadata_streamed": h2(0, SETTINGS0 + unary(1, "ServerMetadata") +
                            unary(3, "ModelMetadata", b"\x0a\x01m")),
    "statistics_broken": h2(0, SETTINGS0 + unary(1, "ModelStatistics", b"\x0a\x01m")),
    "load_busy": h2(0, SETTINGS0 + unary(1, "RepositoryModelLoad", b"\x12\x01m")),
    # Flow control: WINDOW_UPDATE for the connection and a stream, a small
    # initial window from the client (the answer waits for the update).
    "window_updates": h2(0, settings((4, 10), (5, 16384)) + unary(1, "ServerLive", b"abcdefghijkl") +
                         window_update(0, 1000) + window_update(1, 1000)),
    "zero_window_then_open": h2(0, settings((4, 0)) + unary(1, "ServerLive", b"hello") +
                                window_update(1, 100)),
    "continuation": h2(0, SETTINGS0 + frame(HEADERS, 0, 1, live_hdrs[:20]) +
                       frame(CONTINUATION, 0, 1, live_hdrs[20:40]) +
                       frame(CONTINUATION, END_HEADERS, 1, live_hdrs[40:]) +
                       frame(DATA, END_STREAM, 1, grpc_msg())),
    "client_trailers": h2(0, SETTINGS0 + frame(HEADERS, END_HEADERS, 1, live_hdrs) +
                          frame(DATA, 0, 1, grpc_msg(b"x")) +
                          frame(HEADERS, END_HEADERS | END_STREAM, 1, literal("grpc-status", "0"))),
    "goaway_from_client": h2(0, SETTINGS0 + unary(1, "ModelInfer", infer_body) + goaway(1)),
    "priority_padded": h2(0, SETTINGS0 + frame(PRIORITY, 0, 1, struct.pack(">IB", 0, 15)) +
                          frame(HEADERS, END_HEADERS | PRIO | PADDED, 1,
                                b"\x03" + struct.pack(">IB", 0, 200) + live_hdrs + b"\0\0\0") +
                          frame(DATA, END_STREAM | PADDED, 1, b"\x02" + grpc_msg() + b"\0\0")),
    # Indexed and incrementally indexed headers (the dynamic table).
    "hpack_indexed": h2(0, SETTINGS0 +
                        frame(HEADERS, END_HEADERS, 1, b"\x83\x86" + literal(":path", SVC + "ServerLive", True) +
                              literal(":authority", "gw", True) +
                              literal("content-type", "application/grpc", True)) +
                        frame(DATA, END_STREAM, 1, grpc_msg()) +
                        frame(HEADERS, END_HEADERS, 3, b"\x83\x86\xc0\xbf\xbe") +   # dynamic 62-64
                        frame(DATA, END_STREAM, 3, grpc_msg())),
    "metadata_headers": h2(0, SETTINGS0 + unary(1, "ModelInfer", infer_body,
                                                 [("authorization", "Bearer k"), ("grpc-timeout", "100m"),
                                                  ("content-length", "14")])),
    # Limits: concurrent streams (the 9th refused), the header list (431),
    # the body (413 declared and streamed), the echo's own message size.
    "nine_streams": h2(0, SETTINGS0 + b"".join(frame(HEADERS, END_HEADERS, 2 * i + 1, live_hdrs)
                                               for i in range(9)) +
                       b"".join(frame(DATA, END_STREAM, 2 * i + 1, grpc_msg()) for i in range(9))),
    "header_too_big": h2(0, SETTINGS0 + unary(1, "ServerLive", b"", [("x-big", "a" * 1100)])),
    "body_too_big_declared": h2(0, SETTINGS0 + frame(HEADERS, END_HEADERS, 1, grpc_headers(
        SVC + "ModelInfer", [("content-length", "5000")])) + frame(DATA, 0, 1, b"v" * 100)),
    "body_too_big_streamed": h2(0, SETTINGS0 + frame(HEADERS, END_HEADERS, 1, grpc_headers(SVC + "ModelInfer")) +
                                frame(DATA, 0, 1, b"y" * 3000) + frame(DATA, 0, 1, b"y" * 3000) +
                                frame(DATA, END_STREAM, 1, b"y" * 10)),
    "echo_too_big": h2(0, SETTINGS0 + frame(HEADERS, END_HEADERS, 1, live_hdrs) +
                       frame(DATA, 0, 1, b"z" * 1000) + frame(DATA, 0, 1, b"z" * 100) +
                       frame(DATA, END_STREAM, 1, b"z")),
    "flow_control_exceeded": h2(0, SETTINGS0 + frame(HEADERS, END_HEADERS, 1, grpc_headers(SVC + "ModelInfer")) +
                                b"".join(frame(DATA, 0, 1, b"w" * 3000) for _ in range(4))),
    # Floods: rapid reset, PINGs, SETTINGS.
    "rapid_reset": h2(0, SETTINGS0 + b"".join(frame(HEADERS, END_HEADERS, 2 * i + 1, live_hdrs) +
                                              rst(2 * i + 1) for i in range(30))),
    "ping_flood": h2(0, SETTINGS0 + b"".join(ping(struct.pack(">Q", i)) for i in range(30))),
    "settings_flood": h2(0, b"".join(SETTINGS0 for _ in range(40))),
    "continuation_flood": h2(0, SETTINGS0 + frame(HEADERS, 0, 1, live_hdrs[:10]) +
                             b"".join(frame(CONTINUATION, 0, 1, b"") for _ in range(12)) +
                             frame(CONTINUATION, END_HEADERS, 1, live_hdrs[10:])),
    # The connection's ends: server drain, half-close, a client that does not
    # read, a bad preface, the input carrying its own preface.
    "drain_between": h2(H2_DRAIN, SETTINGS0 + unary(1, "ModelInfer", infer_body) +
                        unary(3, "ServerLive"), 50),
    "half_close_pending": h2(H2_HALF_CLOSE, SETTINGS0 + unary(1, "ModelInfer", infer_body) +
                             frame(HEADERS, END_HEADERS, 3, live_hdrs)),
    # Answers past the server's 4 KiB send buffer: short writes, then
    # waiting for the socket (with a client that reads, and one that does not).
    "big_answers_short_writes": h2(0, SETTINGS0 + b"".join(unary(2 * i + 1, "ModelInfer", b"b" * 3000)
                                                           for i in range(4))),
    "big_answers_no_read": h2(H2_NO_READ, SETTINGS0 + b"".join(unary(2 * i + 1, "ModelMetadata", b"n" * 3000)
                                                               for i in range(4))),
    # The server's sends fail (EPIPE) once the first part is in: a deferred
    # answer and a streamed one meet the failure in the loop, not in the
    # handler's call.
    "send_fails_deferred": h2_split(H2_SEND_FAILS, SETTINGS0 + unary(1, "ServerLive"),
                                    unary(3, "ModelInfer", infer_body)),
    "send_fails_streamed": h2_split(H2_SEND_FAILS, SETTINGS0 + unary(1, "ServerLive"),
                                    unary(3, "ModelMetadata", b"m" * 40)),
    "no_read": h2(H2_NO_READ, SETTINGS0 + unary(1, "ServerLive", b"q" * 500) + unary(3, "ModelInfer")),
    "bad_preface": h2(H2_RAW, b"GET / HTTP/1.1\r\nHost: gw\r\n\r\n"),
    "own_preface": h2(H2_RAW, H2_PREFACE + SETTINGS0 + unary(1, "ServerLive")),
    "no_settings_first": h2(0, unary(1, "ServerLive")),
    "not_grpc_get": h2(0, SETTINGS0 + frame(HEADERS, END_HEADERS | END_STREAM, 1,
                                            grpc_headers("/v2/health/live", method="GET"))),
}

# ---- fuzz_grpc_codec: byte 0 the method, byte 1 bit 0 the direction;
# to_http: the request message; from_http: byte 2 the status, bytes 3-4
# Inference-Header-Content-Length (0xffff: none), the HTTP body.
GRPC_METHODS = ["ServerLive", "ServerReady", "ModelReady", "ServerMetadata", "ModelMetadata",
                "ModelInfer", "ModelConfig", "ModelStatistics", "RepositoryIndex",
                "RepositoryModelLoad", "RepositoryModelUnload", "LogSettings", "ModelStreamInfer",
                "SystemSharedMemoryStatus", "SystemSharedMemoryRegister",
                "SystemSharedMemoryUnregister", "CudaSharedMemoryStatus",
                "CudaSharedMemoryRegister", "CudaSharedMemoryUnregister"]
GRPC_STATUSES = [200, 400, 404, 429, 503, 504]


def pb_varint(v):
    v &= (1 << 64) - 1   # negative int64s as ten bytes
    out = b""
    while True:
        b = v & 0x7f
        v >>= 7
        if v:
            out += bytes([b | 0x80])
        else:
            return out + bytes([b])


def pb_key(field, wire):
    return pb_varint(field << 3 | wire)


def pb_uint(field, v):
    return pb_key(field, 0) + pb_varint(v)


def pb_bytes(field, data):
    if isinstance(data, str):
        data = data.encode()
    return pb_key(field, 2) + pb_varint(len(data)) + data


def pb_double(field, v):
    return pb_key(field, 1) + struct.pack("<d", v)


def pb_packed(field, values, fmt=None):
    """A packed repeated field: varints, or fixed-size values by struct format."""
    body = b"".join(struct.pack("<" + fmt, v) if fmt else pb_varint(v) for v in values)
    return pb_bytes(field, body)


def pb_map(field, entries):
    """map<string, message>: each entry a message of key (1) and value (2)."""
    return b"".join(pb_bytes(field, pb_bytes(1, k) + pb_bytes(2, v)) for k, v in entries)


def to_http(method, msg):
    return bytes([GRPC_METHODS.index(method), 0]) + msg


def from_http(method, status, body, json_len=None):
    if isinstance(body, str):
        body = body.encode()
    jl = 0xffff if json_len is None else json_len
    return (bytes([GRPC_METHODS.index(method), 1, GRPC_STATUSES.index(status)]) +
            struct.pack("<H", jl) + body)


def infer_param(kind, v):   # InferParameter's oneof
    if kind == "bool":
        return pb_uint(1, 1 if v else 0)
    if kind == "int64":
        return pb_uint(2, v)
    if kind == "string":
        return pb_bytes(3, v)
    if kind == "double":
        return pb_double(4, v)
    return pb_uint(5, v)


def infer_input(name, dt, shape, contents=None, params=()):
    m = pb_bytes(1, name) + pb_bytes(2, dt) + pb_packed(3, shape)
    m += pb_map(4, [(k, infer_param(kind, v)) for k, kind, v in params])
    if contents is not None:
        m += pb_bytes(5, contents)
    return m


infer_two = (pb_bytes(1, "digits") + pb_bytes(2, "1") + pb_bytes(3, "req-7") +
             pb_map(4, [("priority", infer_param("int64", 2)), ("timeout", infer_param("uint64", 100))]) +
             pb_bytes(5, infer_input("input", "FP32", [1, 2], pb_packed(6, [1.0, 2.5], "f"))) +
             pb_bytes(5, infer_input("mask", "INT64", [1, 2], pb_packed(3, [1, -1]),
                                     [("binary_data", "bool", False)])) +
             pb_bytes(6, pb_bytes(1, "output") + pb_map(2, [("classification", infer_param("int64", 2))])))
infer_raw = (pb_bytes(1, "digits") +
             pb_bytes(5, infer_input("input", "FP32", [1, 2])) +
             pb_bytes(5, infer_input("text", "BYTES", [1])) +
             pb_bytes(7, struct.pack("<2f", 1.0, 2.0)) + pb_bytes(7, struct.pack("<I", 2) + b"hi"))
infer_typed = (pb_bytes(1, "m") +
               pb_bytes(5, infer_input("a", "INT32", [2], pb_packed(2, [7, -7]))) +
               pb_bytes(5, infer_input("b", "BYTES", [2], pb_bytes(8, "x") + pb_bytes(8, ""))) +
               pb_bytes(5, infer_input("c", "BOOL", [1], pb_packed(1, [1]))) +
               pb_bytes(5, infer_input("d", "FP64", [1], pb_packed(7, [0.5], "d"))) +
               pb_bytes(5, infer_input("e", "UINT8", [1], pb_packed(4, [255]))) +
               pb_bytes(5, infer_input("f", "UINT64", [1], pb_packed(5, [1 << 40]))))
out_json = json.dumps({"model_name": "m", "model_version": "1", "id": "req-7",
                       "parameters": {"sequence_id": 0},
                       "outputs": [{"name": "output", "datatype": "FP32", "shape": [1, 2],
                                    "parameters": {"binary_data_size": 8}}]},
                      separators=(",", ":"))
out_two = json.dumps({"model_name": "digits", "model_version": "1",
                      "outputs": [{"name": "probs", "datatype": "FP32", "shape": [1, 2],
                                   "parameters": {"binary_data_size": 8}},
                                  {"name": "label", "datatype": "INT64", "shape": [1],
                                   "data": [3]},
                                  {"name": "text", "datatype": "BYTES", "shape": [1],
                                   "data": ["three"]}]},
                     separators=(",", ":"))
model_config = json.dumps({"name": "digits", "platform": "batchgate_cpu", "backend": "cpu",
                           "max_batch_size": 64,
                           "input": [{"name": "input", "data_type": "TYPE_FP32", "dims": [64]}],
                           "output": [{"name": "output", "data_type": 11, "dims": [10]}],
                           "dynamic_batching": {"preferred_batch_size": [8, 16],
                                                "max_queue_delay_microseconds": 500},
                           "instance_group": [{"count": 2, "kind": "KIND_CPU"}],
                           "parameters": {"k": {"string_value": "v"}}})
model_stats = json.dumps({"model_stats": [{"name": "digits", "version": "1",
                                           "last_inference": 1764800000000, "inference_count": 12,
                                           "execution_count": 3,
                                           "inference_stats": {"success": {"count": 12, "ns": 480000},
                                                               "queue": {"count": 12, "ns": 9000}},
                                           "batch_stats": [{"batch_size": 4,
                                                            "compute_infer": {"count": 3, "ns": 300}}],
                                           "response_stats": {"r": {"success": {"count": 1, "ns": 2}}},
                                           "batchgate_extra": {"shed": 1}}]})
infer_shm = (pb_bytes(1, "digits") +
             pb_bytes(5, infer_input("input", "FP32", [1, 64], None,
                                     [("shared_memory_region", "string", "in"),
                                      ("shared_memory_byte_size", "int64", 256),
                                      ("shared_memory_offset", "int64", 64)])) +
             pb_bytes(5, infer_input("mask", "UINT8", [1])) +
             pb_bytes(6, pb_bytes(1, "output") +
                      pb_map(2, [("shared_memory_region", infer_param("string", "out")),
                                 ("shared_memory_byte_size", infer_param("int64", 40))])) +
             pb_bytes(7, b"\x01"))
shm_status = json.dumps([{"name": "in", "key": "/k in", "offset": 0, "byte_size": 320},
                         {"name": "out", "key": "/k out", "offset": 4096, "byte_size": 40}])
GRPC_SEEDS = {
    "shm_status_to": to_http("SystemSharedMemoryStatus", pb_bytes(1, "in put/%")),
    "shm_register_to": to_http("SystemSharedMemoryRegister",
                               pb_bytes(1, "in") + pb_bytes(2, "/k in") + pb_uint(3, 4096) +
                               pb_uint(4, 320)),
    "shm_unregister_to": to_http("SystemSharedMemoryUnregister", b""),
    "cuda_register_to": to_http("CudaSharedMemoryRegister",
                                pb_bytes(1, "g") + pb_bytes(2, b"\0\1") + pb_uint(3, 0) +
                                pb_uint(4, 16)),
    "shm_status_from": from_http("SystemSharedMemoryStatus", 200, shm_status),
    "cuda_status_from": from_http("CudaSharedMemoryStatus", 200, "[]"),
    "infer_shm_to": to_http("ModelInfer", infer_shm),
    "live_to": to_http("ServerLive", b""),
    "ready_to": to_http("ServerReady", b""),
    "model_ready_to": to_http("ModelReady", pb_bytes(1, "digits") + pb_bytes(2, "1")),
    "server_meta_to": to_http("ServerMetadata", b""),
    "model_meta_to": to_http("ModelMetadata", pb_bytes(1, "digits")),
    "infer_to": to_http("ModelInfer", infer_two),
    "infer_raw_to": to_http("ModelInfer", infer_raw),
    "infer_typed_to": to_http("ModelInfer", infer_typed),
    "config_to": to_http("ModelConfig", pb_bytes(1, "digits") + pb_bytes(2, "2")),
    "stats_all_to": to_http("ModelStatistics", b""),
    "stats_one_to": to_http("ModelStatistics", pb_bytes(1, "digits")),
    "index_to": to_http("RepositoryIndex", pb_bytes(1, "") + pb_uint(2, 1)),
    "load_to": to_http("RepositoryModelLoad",
                       pb_bytes(2, "digits") +
                       pb_map(3, [("config", pb_bytes(3, '{"max_batch_size":8}')),
                                  ("file:1/model.safetensors", pb_bytes(4, b"\0\1\2\3\4")),
                                  ("poll", pb_uint(1, 1)), ("n", pb_uint(2, 5))])),
    "unload_to": to_http("RepositoryModelUnload", pb_bytes(2, "digits") +
                         pb_map(3, [("unload_dependents", pb_uint(1, 1))])),
    "log_read_to": to_http("LogSettings", b""),
    "log_set_to": to_http("LogSettings", pb_map(1, [("log_verbose_level", pb_uint(2, 1)),
                                                    ("log_info", pb_uint(1, 1)),
                                                    ("log_format", pb_bytes(3, "default"))])),
    "stream_infer_to": to_http("ModelStreamInfer", infer_two),
    "bad_model_name_to": to_http("ModelReady", pb_bytes(1, "a/b")),
    "live_from": from_http("ServerLive", 200, ""),
    "live_503_from": from_http("ServerLive", 503, '{"error":"draining"}'),
    "ready_503_from": from_http("ServerReady", 503, ""),
    "model_ready_404_from": from_http("ModelReady", 404, '{"error":"no model \\"x\\""}'),
    "server_meta_from": from_http("ServerMetadata", 200,
                                  '{"name":"batchgate","version":"0.1","extensions":["binary_tensor_data","model_repository"]}'),
    "model_meta_from": from_http("ModelMetadata", 200,
                                 '{"name":"digits","versions":["1"],"platform":"batchgate_cpu",'
                                 '"inputs":[{"name":"input","datatype":"FP32","shape":[-1,64]}],'
                                 '"outputs":[{"name":"output","datatype":"FP32","shape":[-1,10]}]}'),
    "infer_from": from_http("ModelInfer", 200, out_json.encode() + struct.pack("<2f", 0.25, 0.75),
                            len(out_json)),
    "infer_mixed_from": from_http("ModelInfer", 200, out_two.encode() + struct.pack("<2f", 0.5, 0.5),
                                  len(out_two)),
    "infer_json_only_from": from_http("ModelInfer", 200,
                                      '{"model_name":"m","outputs":[{"name":"o","datatype":"INT32",'
                                      '"shape":[2],"data":[1,2]},{"name":"e","datatype":"FP32","shape":[0],"data":[]}]}'),
    "infer_429_from": from_http("ModelInfer", 429, '{"error":{"message":"queue full","type":"rate_limit_error"}}'),
    "infer_504_from": from_http("ModelInfer", 504, '{"error":"deadline"}'),
    "config_from": from_http("ModelConfig", 200, model_config),
    "stats_from": from_http("ModelStatistics", 200, model_stats),
    "index_from": from_http("RepositoryIndex", 200,
                            '[{"name":"digits","version":"1","state":"READY"},'
                            '{"name":"bert","state":"UNAVAILABLE","reason":"unloaded"}]'),
    "load_from": from_http("RepositoryModelLoad", 200, ""),
    "load_400_from": from_http("RepositoryModelLoad", 400, '{"error":"bad config"}'),
    "unload_from": from_http("RepositoryModelUnload", 200, ""),
    "log_from": from_http("LogSettings", 200,
                          '{"log_file":"","log_info":true,"log_warning":true,"log_error":true,'
                          '"log_verbose_level":0,"log_format":"default"}'),
    "stream_infer_from": from_http("ModelStreamInfer", 200,
                                   out_json.encode() + struct.pack("<2f", 0.25, 0.75), len(out_json)),
    "stream_infer_503_from": from_http("ModelStreamInfer", 503, '{"error":"model m is not ready"}'),
}


# ---- fuzz_scrape: an LLM server's /metrics body as it is
LLAMA = 'model_name="meta-llama/Llama-3.1-8B-Instruct"'
SCRAPE_SEEDS = {
    "vllm_v1_two_engines": "".join(
        "# HELP vllm:%s %s\n# TYPE vllm:%s %s\n" % (n, h, n, t)
        + "".join('vllm:%s{engine="%d",%s} %s\n' % (n, e, LLAMA, v) for e, v in enumerate(vs))
        for n, h, t, vs in [
            ("num_requests_running", "Number of requests in model execution batches.", "gauge",
             ["12.0", "9.0"]),
            ("num_requests_waiting", "Number of requests waiting to be processed.", "gauge",
             ["4.0", "1.0"]),
            ("kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", "gauge",
             ["0.82", "0.61"]),
            ("prefix_cache_hits_total", "Prefix cache hits, in terms of number of cached tokens.",
             "counter", ["800000.0", "600000.0"]),
            ("prompt_tokens_total", "Number of prefill tokens processed.", "counter",
             ["1.23e+06", "1.0e+06"]),
        ])
    + 'vllm:prompt_tokens_created{engine="0",%s} 1.7500000123e+09\n' % LLAMA
    + 'vllm:time_to_first_token_seconds_bucket{le="+Inf",%s} 1\n' % LLAMA,
    "vllm_v0": "# HELP vllm:gpu_cache_usage_perc GPU KV-cache usage. 1 means 100 percent usage.\n"
               "# TYPE vllm:gpu_cache_usage_perc gauge\n"
               'vllm:gpu_cache_usage_perc{model_name="mistral"} 0.25\n'
               'vllm:num_requests_waiting{model_name="mistral"} 0.0\n'
               'vllm:num_requests_swapped{model_name="mistral"} 0.0\n'
               'vllm:prompt_tokens_total{model_name="mistral"} 5000.0\n',
    "llamacpp": "# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed.\n"
                "# TYPE llamacpp:prompt_tokens_total counter\n"
                "llamacpp:prompt_tokens_total 1173\n"
                "# TYPE llamacpp:prompt_tokens_cached_total counter\n"
                "llamacpp:prompt_tokens_cached_total 585\n"
                "# HELP llamacpp:prompt_tokens_seconds Average prompt throughput in tokens/s.\n"
                "# TYPE llamacpp:prompt_tokens_seconds gauge\n"
                "llamacpp:prompt_tokens_seconds 160.202\n"
                "# HELP llamacpp:requests_processing Number of requests processing.\n"
                "# TYPE llamacpp:requests_processing gauge\n"
                "llamacpp:requests_processing 1\n"
                "# HELP llamacpp:requests_deferred Number of requests deferred.\n"
                "# TYPE llamacpp:requests_deferred gauge\n"
                "llamacpp:requests_deferred 0\n",
    "sglang": "# HELP sglang:num_running_reqs The number of running requests.\n"
              "# TYPE sglang:num_running_reqs gauge\n"
              'sglang:num_running_reqs{model_name="qwen",dp_rank="0"} 7.0\n'
              'sglang:num_running_reqs{model_name="qwen",dp_rank="1"} 5.0\n'
              'sglang:num_queue_reqs{model_name="qwen",dp_rank="0"} 3.0\n'
              'sglang:token_usage{model_name="qwen",dp_rank="0"} 0.41\n'
              'sglang:token_usage{model_name="qwen",dp_rank="1"} 0.37\n'
              'sglang:prompt_tokens_total{model_name="qwen"} 91234.0\n'
              'sglang:cached_tokens_total{model_name="qwen"} 40000.0\n',
    "tgi": "# TYPE tgi_batch_current_max_tokens gauge\n"
           "tgi_batch_current_max_tokens 2048\n"
           "# TYPE tgi_queue_size gauge\ntgi_queue_size 2\n"
           "# TYPE tgi_batch_current_size gauge\ntgi_batch_current_size 6\n"
           'tgi_request_duration_bucket{le="0.5"} 10\n',
    "openmetrics_crlf": "# TYPE vllm:num_requests_waiting gauge\r\n"
                        'vllm:num_requests_waiting{model_name="m"} 2 1712345678000\r\n'
                        'vllm:prompt_tokens_total{model_name="m"} 40 1712345678.5 # {trace_id="ab"} 1\r\n'
                        'vllm:kv_cache_usage_perc {model_name = "m" , } +Inf\r\n'
                        "vllm:num_requests_running NaN\r\n# EOF\r\n",
    "label_escapes": 'vllm:num_requests_waiting{model_name="a\\"b\\\\c\\nd",engine="0"} 3\n'
                     'vllm:num_requests_waiting{model_name="}",engine="1"} 1\n'
                     'vllm:num_requests_running{model_name="x"\t}\t-2\n',
    "cut_short": 'vllm:num_requests_waiting{model_name="m"} 1\nvllm:num_requests_running 12',
    "html_error": "<html>\n<body>502 Bad Gateway</body>\n</html>\n",
    "node_exporter": "# HELP node_load1 1m load average.\n# TYPE node_load1 gauge\nnode_load1 0.42\n",
}
SCRAPE_SEEDS = {k: v.encode() for k, v in SCRAPE_SEEDS.items()}

# ---- fuzz_upstream_codec: byte 0 = output (y [2], probs [10], out [1], logits [2,3])
# | TF Serving << 2 | (rows - 1) << 3; byte 1 = message buffer - 1; the body
def uc(which, tfs, rows, body, cap=256):
    return bytes([which | tfs << 2 | (rows - 1) << 3, cap - 1]) + body.encode()


UPSTREAM_SEEDS = {
    "kserve_y": uc(0, 0, 2, '{"model_name":"m","model_version":"1","outputs":[{"name":"y",'
                            '"datatype":"FP32","shape":[2,2],"data":[0.1,0.9,0.7,0.3]}]}'),
    "kserve_logits_nested": uc(3, 0, 1, '{"outputs":[{"name":"logits","datatype":"FP32",'
                                        '"shape":[1,2,3],"data":[[[1,2,3],[4,5,6.5]]]}]}'),
    "kserve_two_outputs_fp64": uc(1, 0, 1, '{"outputs":[{"name":"other","datatype":"BYTES",'
                                           '"shape":[1],"data":["x"]},{"name":"probs",'
                                           '"datatype":"FP64","shape":[1,10],"data":[0,0.1,null,'
                                           '0.3,1e39,-1e39,0.6,0.7,0.8,0.9]}]}'),
    "kserve_int64": uc(2, 0, 3, '{"outputs":[{"name":"out","datatype":"INT64","shape":[3,1],'
                                '"data":[1,-2,9007199254740993]}]}'),
    "kserve_short": uc(0, 0, 2, '{"outputs":[{"name":"y","datatype":"FP32","shape":[2,2],'
                                '"data":[1,2,3]}]}', 24),
    "tfs_rows": uc(0, 1, 2, '{"predictions":[[0.1,0.9],[NaN,Infinity]]}'),
    "tfs_scalars": uc(2, 1, 4, '{"predictions":[1.5,2,-Infinity,null]}'),
    "tfs_objects": uc(0, 1, 2, '{"predictions":[{"y":[1,2],"z":3},{"y":[3,4],"z":"a"}]}'),
    "tfs_nested": uc(3, 1, 1, '{"predictions": [[[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]]}'),
    "triton_error": uc(0, 0, 1, '{"error":"Request for unknown model: \'m\' is not found"}', 16),
    "openai_error": uc(0, 0, 1, '{"error":{"message":"The model `m` does not exist\\u00e9\\n",'
                                '"type":"NotFoundError","code":404}}'),
    "tfs_status_available": uc(0, 1, 1, '{"model_version_status":[{"version":"2","state":'
                                        '"AVAILABLE","status":{"error_code":"OK",'
                                        '"error_message":""}}]}'),
    "tfs_status_loading": uc(0, 1, 1, '{"model_version_status":[{"version":"1","state":"END"},'
                                      '{"version":"2","state":"LOADING"},{"version":"3","state":'
                                      '"UNLOADING"},{"version":"4","state":"START"},'
                                      '{"version":"5","state":"LOADING"}]}', 40),
}

# ---- fuzz_llmbody: a client's body for an LLM pool, or a Batch API line
def jd(v):
    return json.dumps(v).encode()


CHAT = {"model": "llama", "messages": [{"role": "system", "content": "Be brief, \"exact\", {ok}."},
                                       {"role": "user", "content": [{"type": "text",
                                                                     "text": "Hi, [1]: 2"}]}],
        "stream": True, "stream_options": {"include_usage": True}, "max_tokens": 256, "n": 1,
        "temperature": 0.7, "stop": [], "logit_bias": {}}
LLMBODY_SEEDS = {
    "chat": jd(CHAT),
    "completion": jd({"model": "m", "prompt": ["a", "b", [1, 2, 3]], "max_tokens": 16,
                      "best_of": 3, "n": 2, "stream": False, "echo": None}),
    "llamacpp": jd({"prompt": "x", "n_predict": -1, "max_tokens": None, "stream": None}),
    "bad_stream": jd({"model": "m", "prompt": "x", "stream": "yes"}),
    "bad_max_tokens": jd({"model": "m", "prompt": "x", "max_tokens": "5000"}),
    "too_many": b'{"model":"m","n":129,"max_completion_tokens":1073741825,"max_tokens":1.5}',
    "int64_end": b'{"model":"m","max_tokens":9223372036854775807,"n":-9223372036854775808}',
    "batch_line": jd({"custom_id": "req-1", "method": "POST", "url": "/v1/chat/completions",
                      "body": dict(CHAT, stream=False, max_completion_tokens=64)}),
    "duplicates_escapes": b'{"model":"m","stream":"x","stream":false,"s\\"t,r:e[a{m":'
                          b'"\\\\",  "a" : [ ] , "b":{}}',
}

# ---- fuzz_governance: a PUT /v2/governance body
GOVERNANCE_SEEDS = {
    "sao_paulo": jd({"timezone": "America/Sao_Paulo", "windows": [
        {"name": "day", "days": ["mon", "tue", "wed", "thu", "fri"], "from": "08:00",
         "to": "20:00", "shares": {"search": 0.8, "research": 0.2}},
        {"name": "night", "days": ["fri"], "from": "20:00", "to": "08:00:30",
         "shares": {"search": 0.3, "research": 0.2}, "offline_share": 0.5}]}),
    "spec_night": jd({"timezone": "Europe/Paris", "windows": [
        {"name": "night", "from": "22:00", "to": "06:00",
         "shares": {"search": 0.3, "research": 0.7}, "offline_share": 0.5}]}),
    "sunday_past_midnight": jd({"timezone": "UTC", "windows": [
        {"name": "sun-late", "days": ["sun"], "from": "23:30", "to": "00:30"},
        {"name": "mon.day", "days": ["mon"], "from": "00:30", "to": "23:30",
         "shares": {"default": 0.4}}]}),
    "host_zone_empty": jd({"windows": []}),
    "empty": b"{}",
    "overlap": jd({"windows": [{"name": "a", "from": "08:00", "to": "12:00"},
                               {"name": "b", "days": ["wed"], "from": "11:59:59",
                                "to": "13:00"}]}),
    "above_limit": jd({"windows": [{"name": "x", "from": "00:00", "to": "01:00",
                                    "shares": {"default": 0.5}}]}),
    "bad_zone": jd({"timezone": "../etc/passwd", "windows": []}),
    "bad_fields": jd({"windows": [{"name": "bad name", "days": ["mon", "mon"], "from": "24:00",
                                   "to": "7:00", "color": "red"}]}),
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
    write("fuzz_h2", H2_SEEDS)
    write("fuzz_grpc_codec", GRPC_SEEDS)
    write("fuzz_scrape", SCRAPE_SEEDS)
    write("fuzz_upstream_codec", UPSTREAM_SEEDS)
    write("fuzz_llmbody", LLMBODY_SEEDS)
    write("fuzz_governance", GOVERNANCE_SEEDS)
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
