"""Compressed answers (docs/CONFIG.md "Compressed answers", http/encode.c):

- HTTP/1.1, with compression.responses on: an answer of
  compression.min_bytes or more leaves gzip- or
  deflate-compressed when Accept-Encoding takes it (q-values, "*"), with
  Vary: Accept-Encoding, and inflates to the very bytes of the plain answer;
  identity when Accept-Encoding refuses both or names neither; small answers
  and errors as they are; HEAD announces the length GET sends.
- gRPC, with compression.grpc on: a ModelInfer answer (unary) and a
  ModelStreamInfer message are compressed (the message's flag 1) when
  grpc-accept-encoding lists gzip or deflate, and decode to the same
  protobuf as the plain one; with it off (the default) they are not.
- off by default (both); a min_bytes above the answer turns it off.
tritonclient reads such answers in test_tritonclient.py (its
response_compression_algorithm), grpcio in test_grpc.py's surface test
(compression.grpc on there)."""

import gzip
import json
import re
import struct
import unittest
import zlib

from harness import RepoServerCase, roundtrip
from test_h2_flood import H2, grpc_headers, model_infer
from test_infer import synthetic, write_model

ROWS = [[float(i), 1.0, 2.0, 3.0] for i in range(8)]


def infer_json(rows=ROWS):
    return json.dumps({"inputs": [{"name": "x", "datatype": "FP32", "shape": [len(rows), 4],
                                   "data": rows}]})


class CompressionCase(RepoServerCase):
    config = {"compression": {"responses": True}}

    @classmethod
    def populate(cls, repo):
        # 8 rows of 40 outputs: a JSON answer of a few KiB.
        cfg = synthetic("wide", base_us=100, per_row_us=0)
        cfg["outputs"][0]["shape"] = [40]
        write_model(repo, "wide", cfg)

    def infer(self, accept=None, method="POST"):
        h = [("Content-Type", "application/json")]
        if accept is not None:
            h.append(("Accept-Encoding", accept))
        return roundtrip(self.srv.port, method, "/v2/models/wide/infer", h, infer_json())


class HttpCompressionTest(CompressionCase):
    def test_codings_by_accept_encoding(self):
        plain = self.infer()
        self.assertEqual(plain.status, 200, plain)
        self.assertGreater(len(plain.body), 1024)
        self.assertIsNone(plain.headers.get("Content-Encoding"))
        self.assertEqual(plain.headers.get("Vary"), "Accept-Encoding")
        for accept, coding in (("gzip", "gzip"), ("gzip, deflate", "gzip"),
                               ("deflate", "deflate"), ("gzip;q=0.2, deflate;q=0.9", "deflate"),
                               ("*", "gzip"), ("x-gzip", "gzip"),
                               ("gzip;q=0, deflate;q=0", None), ("br, zstd", None),
                               ("identity", None)):
            r = self.infer(accept)
            self.assertEqual(r.status, 200, r)
            self.assertEqual(r.headers.get("Content-Encoding"), coding, (accept, r))
            self.assertEqual(r.headers.get("Vary"), "Accept-Encoding", r)
            self.assertEqual(int(r.headers["Content-Length"]), len(r.body))
            body = r.body
            if coding == "gzip":
                body = gzip.decompress(body)
                self.assertLess(len(r.body), len(plain.body) / 3)
            elif coding == "deflate":
                body = zlib.decompress(body)   # zlib's format, RFC 9110's deflate
            self.assertEqual(body, plain.body, accept)

    def test_head_announces_what_get_sends(self):
        get = roundtrip(self.srv.port, "GET", "/metrics", [("Accept-Encoding", "gzip")])
        self.assertEqual(get.headers.get("Content-Encoding"), "gzip", get)
        self.assertTrue(gzip.decompress(get.body).startswith(b"# HELP"))
        head = roundtrip(self.srv.port, "HEAD", "/metrics", [("Accept-Encoding", "gzip")])
        self.assertEqual(head.headers.get("Content-Encoding"), "gzip", head)
        self.assertEqual(head.body, b"")

    def test_grpc_messages_plain_by_default(self):
        flag, msg = GrpcCompressionTest.call(self, "ModelInfer", "identity,deflate,gzip")
        self.assertEqual(flag, 0)
        self.assertGreater(len(msg), 1024)

    def test_small_answers_and_errors_as_they_are(self):
        for method, path in (("GET", "/v2/health/ready"), ("GET", "/v2/models/nope"),
                             ("GET", "/v2/models/wide")):
            r = roundtrip(self.srv.port, method, path, [("Accept-Encoding", "gzip")])
            self.assertLess(len(r.body), 1024, r)
            self.assertIsNone(r.headers.get("Content-Encoding"), r)
            self.assertIsNone(r.headers.get("Vary"), r)
            json.loads(r.body)


class GrpcCompressionTest(CompressionCase):
    config = {"compression": {"responses": True, "grpc": True}}

    def call(self, method, accept):
        c = H2(self.srv.grpc_port)
        try:
            extra = [("grpc-accept-encoding", accept)] if accept else []
            r = c.call(method, model_infer("wide", ROWS), extra=extra)
        finally:
            c.close()
        self.assertTrue(r.ended, r)
        self.assertEqual(r.status(), 200, r)
        self.assertGreaterEqual(len(r.data), 5, r)
        flag, n = r.data[0], int.from_bytes(r.data[1:5], "big")
        self.assertEqual(len(r.data), 5 + n, "one message: %r" % r)
        return flag, r.data[5:]

    def test_messages_compressed_when_asked(self):
        for method in ("ModelInfer", "ModelStreamInfer"):
            flag, plain = self.call(method, None)
            self.assertEqual(flag, 0)
            self.assertIn(b"wide", plain)
            self.assertGreater(len(plain), 1024)
            flag, packed = self.call(method, "identity,deflate,gzip")
            self.assertEqual(flag, 1, method)
            self.assertEqual(gzip.decompress(packed), plain, method)
            flag, packed = self.call(method, "deflate")
            self.assertEqual(flag, 1, method)
            self.assertEqual(zlib.decompress(packed), plain, method)
            flag, same = self.call(method, "identity")
            self.assertEqual((flag, same), (0, plain), method)


class GrpcCompressedRequestsTest(CompressionCase):
    """A request message's compressed flag against its grpc-encoding, each
    case answered with the code gRPC's own servers give it, counted in
    grpc_calls_total (its trailers are HPACK-coded: the metric reads them)."""
    config = {"limits": {"max_body_bytes": 1 << 20}}

    def codes(self):
        text = roundtrip(self.srv.port, "GET", "/metrics").body.decode()
        return {m.group(1): int(m.group(2)) for m in re.finditer(
            r'^batchgate_grpc_calls_total\{method="ModelInfer",code="(\w+)"\} (\d+)$', text,
            re.M)}

    def send(self, flag, payload, encoding):
        c = H2(self.srv.grpc_port)
        try:
            if isinstance(encoding, tuple):
                extra = [("grpc-encoding", e) for e in encoding]
            else:
                extra = [("grpc-encoding", encoding)] if encoding is not None else []
            msg = bytes([flag]) + struct.pack(">I", len(payload)) + payload
            r = c.reply(c.start(grpc_headers("ModelInfer", extra=extra), msg))
        finally:
            c.close()
        self.assertTrue(r.ended, r)

    def test_each_case_its_code(self):
        plain = model_infer("wide", ROWS)
        bomb = gzip.compress(b"\0" * (4 << 20))   # 4 KiB inflating past max_body_bytes
        for flag, payload, encoding, code in (
                (1, gzip.compress(plain), "gzip", "OK"),
                (1, zlib.compress(plain), "deflate", "OK"),
                (1, plain, "identity", "INTERNAL"),       # flag and header disagree
                (1, b"notgzipdata", "gzip", "INTERNAL"),  # does not inflate
                (1, gzip.compress(plain)[:-9], "gzip", "INTERNAL"),   # cut short
                # No grpc-encoding, or an empty one, is identity, as
                # grpc-go reads it (the empty one's bytes were taken as the
                # message, no header was UNIMPLEMENTED).
                (1, plain, None, "INTERNAL"),
                (1, plain, "", "INTERNAL"),
                (1, gzip.compress(plain), "snappy", "UNIMPLEMENTED"),
                # Two fields are one list, codings stacked (the first alone
                # was undone: OK for a body gzipped once), as HTTP's 415.
                (1, gzip.compress(plain), ("gzip", "identity"), "UNIMPLEMENTED"),
                (1, gzip.compress(gzip.compress(plain)), ("gzip", "gzip"), "UNIMPLEMENTED"),
                (1, bomb, "gzip", "RESOURCE_EXHAUSTED"),
                (2, plain, "gzip", "INTERNAL")):
            before = self.codes()
            self.send(flag, payload, encoding)
            after = self.codes()
            grew = {k for k in after if after[k] > before.get(k, 0)}
            self.assertEqual(grew, {code}, (flag, encoding, payload[:16], before, after))


class CompressionOffTest(CompressionCase):
    config = {}

    def test_off(self):
        # Both are off by default, whatever the client asks or lists.
        r = self.infer("gzip")
        self.assertEqual(r.status, 200, r)
        self.assertIsNone(r.headers.get("Content-Encoding"), r)
        self.assertIsNone(r.headers.get("Vary"), r)
        self.assertEqual(r.body, self.infer().body)
        flag, _ = GrpcCompressionTest.call(self, "ModelInfer", "gzip")
        self.assertEqual(flag, 0)


class CompressionThresholdTest(CompressionCase):
    config = {"compression": {"responses": True, "min_bytes": 1 << 20, "level": 9, "grpc": True}}

    def test_below_min_bytes(self):
        r = self.infer("gzip")
        self.assertEqual(r.status, 200, r)
        self.assertGreater(len(r.body), 1024)
        self.assertIsNone(r.headers.get("Content-Encoding"), r)
        flag, _ = GrpcCompressionTest.call(self, "ModelInfer", "gzip")
        self.assertEqual(flag, 0)


if __name__ == "__main__":
    unittest.main()
