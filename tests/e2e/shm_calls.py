"""shm_calls.py - Triton's system shared memory extension through Triton's own
Python client (tritonclient.http and tritonclient.utils.shared_memory,
unmodified) against a running batchgate. Not a test module: it needs
tritonclient and numpy, so it runs under the interpreter of the virtual
environment scripts/fetch-testdeps makes, started by test_shm.py, which owns
the server and the repository:

    VENV/bin/python shm_calls.py --url 127.0.0.1:PORT --grpc 127.0.0.1:GPORT \
        --model digits --prefix KEYPREFIX

--model has one FP32 input of 64 and one FP32 output of 10 per row (the
bundled digits). Regions are created under keys starting with --prefix, so
the test can look for them in the server's /proc/PID/maps. Each check
prints "ok: ..." as it passes; the first that fails prints "FAIL: ..." and
exits 1. Every region is destroyed on the way out, failed or not."""

import argparse
import sys

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as shm
from tritonclient.utils import InferenceServerException


class CheckFailed(Exception):
    pass


def expect(cond, what):
    if not cond:
        raise CheckFailed(what)


def refused(what, fn, status, words):
    """fn() must raise InferenceServerException with `status` and `words` in its message."""
    try:
        fn()
    except InferenceServerException as e:
        msg = e.message() or ""
        expect(str(e.status()) == str(status),
               "%s: expected HTTP %s, got %s (%s)" % (what, status, e.status(), msg))
        expect(words in msg, "%s: message %r lacks %r" % (what, msg, words))
        return msg
    raise CheckFailed("%s: expected HTTP %s, the call succeeded" % (what, status))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--prefix", required=True)
    ap.add_argument("--grpc", required=True, help="HOST:PORT of batchgate's gRPC port")
    a = ap.parse_args()
    c = httpclient.InferenceServerClient(a.url)
    handles = []

    def region(name, size):
        h = shm.create_shared_memory_region(name, a.prefix + name, size)
        handles.append(h)
        return h

    try:
        c.unregister_system_shared_memory()
        expect(c.get_system_shared_memory_status() == [], "status after unregister-all is not []")
        print("ok: unregister all, empty status")

        rows = 3
        x = np.random.default_rng(7).random((rows, 64), dtype=np.float32)
        in_bytes, out_bytes = x.nbytes, rows * 10 * 4
        # The input at offset 64 of its region, the output at 32 of a region
        # of its own, registered at offset 4096 of its object (past a page).
        hin = region("in", 64 + in_bytes)
        shm.set_shared_memory_region(hin, [x], offset=64)
        hout = region("out", 4096 + 32 + out_bytes + 100)
        c.register_system_shared_memory("in", a.prefix + "in", 64 + in_bytes)
        c.register_system_shared_memory("out", a.prefix + "out", 32 + out_bytes + 100, offset=4096)
        st = c.get_system_shared_memory_status()
        expect(st == [{"name": "in", "key": a.prefix + "in", "offset": 0, "byte_size": 64 + in_bytes},
                      {"name": "out", "key": a.prefix + "out", "offset": 4096,
                       "byte_size": 32 + out_bytes + 100}],
               "status: %r" % (st,))
        one = c.get_system_shared_memory_status("out")
        expect(len(one) == 1 and one[0]["name"] == "out", "status of out: %r" % (one,))
        print("ok: register two regions, status in Triton's shape")

        # The reference: the same rows over JSON.
        ij = httpclient.InferInput("input", [rows, 64], "FP32")
        ij.set_data_from_numpy(x, binary_data=False)
        ref = c.infer(a.model, [ij], outputs=[httpclient.InferRequestedOutput(
            "output", binary_data=False)]).as_numpy("output")

        def shm_infer(in_size=in_bytes, in_off=64, out_size=out_bytes, out_off=32,
                      in_region="in", out_region="out", out_shm=True):
            i = httpclient.InferInput("input", [rows, 64], "FP32")
            i.set_shared_memory(in_region, in_size, offset=in_off)
            o = httpclient.InferRequestedOutput("output", binary_data=True)
            if out_shm:
                o.set_shared_memory(out_region, out_size, offset=out_off)
            return c.infer(a.model, [i], outputs=[o])

        r = shm_infer()
        out = r.get_output("output")
        expect(out is not None and out["shape"] == [rows, 10] and "data" not in out,
               "output in shared memory: answer %r" % (r.get_response(),))
        got = shm.get_contents_as_numpy(hout, np.float32, [rows, 10], offset=4096 + 32)
        expect(np.allclose(got, ref, rtol=1e-6, atol=1e-7),
               "shared memory output differs from JSON's: max |d| %g" % np.abs(got - ref).max())
        print("ok: input and output in shared memory equal the JSON answer")

        r = shm_infer(out_shm=False)
        expect(np.allclose(r.as_numpy("output"), ref, rtol=1e-6, atol=1e-7),
               "input in shared memory, output binary: differs from JSON")
        print("ok: input in shared memory, output in the body")

        refused("unknown region", lambda: shm_infer(in_region="nope"), 400,
                "no system shared memory region \"nope\"")
        refused("input past its region", lambda: shm_infer(in_off=65), 400, "past the end of region")
        refused("wrong input byte_size", lambda: shm_infer(in_size=in_bytes - 4), 400,
                "shared_memory_byte_size: %d bytes, but shape" % (in_bytes - 4))
        refused("output too small", lambda: shm_infer(out_size=out_bytes - 1), 400,
                "too small for the output")
        refused("output past its region", lambda: shm_infer(out_off=32 + 101), 400,
                "past the end of region \"out\"")
        refused("register a key that does not exist",
                lambda: c.register_system_shared_memory("x", a.prefix + "none", 16), 400,
                "no shared memory object")
        refused("register twice", lambda: c.register_system_shared_memory(
            "in", a.prefix + "in", 16), 400, "already registered")
        refused("register past the object", lambda: c.register_system_shared_memory(
            "big", a.prefix + "in", 64 + in_bytes + 1), 400, "past the end of the shared memory object")
        refused("status of an unknown region", lambda: c.get_system_shared_memory_status("nope"),
                404, "no system shared memory region")
        print("ok: every bad case is refused with its reason")

        c.unregister_system_shared_memory("in")
        expect([s["name"] for s in c.get_system_shared_memory_status()] == ["out"],
               "after unregistering in: %r" % (c.get_system_shared_memory_status(),))
        refused("an unregistered region", lambda: shm_infer(), 400, "no system shared memory region \"in\"")
        c.unregister_system_shared_memory("in")   # again: no error, as in Triton
        c.unregister_system_shared_memory()
        expect(c.get_system_shared_memory_status() == [], "status after unregister-all is not []")
        print("ok: unregister one, again, and all")

        # The same over gRPC (tritonclient.grpc): register, status as a map,
        # input and output in regions equal to JSON's answer, an unknown
        # region INVALID_ARGUMENT, unregister.
        g = grpcclient.InferenceServerClient(a.grpc)
        g.register_system_shared_memory("gin", a.prefix + "in", 64 + in_bytes)
        g.register_system_shared_memory("gout", a.prefix + "out", 32 + out_bytes + 100,
                                        offset=4096)
        gst = g.get_system_shared_memory_status(as_json=True).get("regions", {})
        expect(sorted(gst) == ["gin", "gout"] and gst["gout"].get("offset") in ("4096", 4096),
               "gRPC status: %r" % (gst,))
        shm.set_shared_memory_region(hout, [np.zeros((rows, 10), np.float32)], offset=4096 + 32)
        gi = grpcclient.InferInput("input", [rows, 64], "FP32")
        gi.set_shared_memory("gin", in_bytes, offset=64)
        go = grpcclient.InferRequestedOutput("output")
        go.set_shared_memory("gout", out_bytes, offset=32)
        gr = g.infer(a.model, [gi], outputs=[go])
        gout = gr.get_output("output")
        expect(gout is not None and list(gout.shape) == [rows, 10],
               "gRPC output in shared memory: %r" % (gr.get_response(),))
        got = shm.get_contents_as_numpy(hout, np.float32, [rows, 10], offset=4096 + 32)
        expect(np.allclose(got, ref, rtol=1e-6, atol=1e-7),
               "gRPC shared memory output differs from JSON's: max |d| %g" % np.abs(got - ref).max())
        gi2 = grpcclient.InferInput("input", [rows, 64], "FP32")
        gi2.set_shared_memory("nope", in_bytes)
        try:
            g.infer(a.model, [gi2])
            raise CheckFailed("gRPC infer from an unknown region succeeded")
        except InferenceServerException as e:
            expect("INVALID_ARGUMENT" in str(e.status()) and "nope" in (e.message() or ""),
                   "gRPC unknown region: %s %s" % (e.status(), e.message()))
        g.unregister_system_shared_memory()
        expect(not g.get_system_shared_memory_status(as_json=True).get("regions"),
               "gRPC status after unregister-all is not empty")
        # A region's name is the client's bytes, '%' included: the clients
        # quote it once and batchgate decoded it twice ("a%41" was
        # registered as "aA", unregistering one took the other, "50%off"
        # could not be registered at all).
        for cl, names in ((c, lambda: sorted(s["name"] for s in c.get_system_shared_memory_status())),
                          (g, lambda: sorted(g.get_system_shared_memory_status(as_json=True)
                                             .get("regions", {})))):
            for name in ("a%41", "aA", "50%off"):
                cl.register_system_shared_memory(name, a.prefix + "in", 64 + in_bytes)
            expect(names() == ["50%off", "a%41", "aA"], "names with '%%': %r" % (names(),))
            r = shm_infer(in_region="a%41", out_shm=False)
            expect(np.allclose(r.as_numpy("output"), ref, rtol=1e-6, atol=1e-7),
                   "input from region \"a%41\" differs from JSON")
            cl.unregister_system_shared_memory("a%41")
            expect(names() == ["50%off", "aA"], "after unregistering a%%41: %r" % (names(),))
            cl.unregister_system_shared_memory()
        g.close()
        print("ok: gRPC: register, status map, input and output in regions equal JSON's, "
              "unknown region INVALID_ARGUMENT, unregister; names with '%' as given, both ways")
    except CheckFailed as e:
        print("FAIL: %s" % e)
        return 1
    finally:
        for h in handles:
            shm.destroy_shared_memory_region(h)
    return 0


if __name__ == "__main__":
    sys.exit(main())
