"""classification_calls.py - Triton's classification extension through
Triton's own clients (tritonclient.http and tritonclient.grpc, unmodified,
and the protocol's generated stub for what the clients cannot send) against
a running batchgate. Not a test module: it needs tritonclient, grpcio and
numpy, so it runs under the interpreter of the virtual environment that
scripts/fetch-testdeps makes, started by test_classification.py, which owns
the server and its repository:

    VENV/bin/python classification_calls.py --http 127.0.0.1:PORT \\
        --grpc 127.0.0.1:PORT --labels MODEL=LABELS_FILE --plain MODEL \\
        --rows ROWS_JSON

--labels names a model whose output has a labels file (and the file, to
read the expected labels from), --plain the same model without labels;
--rows is a JSON list of input rows. For every model, protocol (HTTP JSON,
HTTP binary, gRPC) and k, the top-k must be the full output sorted by value
(descending, ties by index): each index equal, each value the full
output's value printed to 6 decimals, each label the file's line. Then the
refusals: k = 0, k past the output's size and k not an integer are 400 (or
INVALID_ARGUMENT) with a message naming the parameter.

Each check prints "ok: ..." as it passes; the first that fails prints
"FAIL: ..." with the reason and exits 1. Every call has a deadline."""

import argparse
import json
import sys
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


def expected_classes(full_row, k, labels):
    """The top k of one row as the extension defines them: larger values
    first, equal values by index; "%f" of the value (the float widened to
    double, as C's printf and Triton's std::to_string print it)."""
    order = sorted(range(len(full_row)), key=lambda i: (-float(full_row[i]), i))[:k]
    out = []
    for i in order:
        s = "%f:%d" % (float(full_row[i]), i)
        if labels and labels[i]:
            s += ":" + labels[i]
        out.append(s)
    return out


def as_text(v):
    return v.decode("utf-8") if isinstance(v, bytes) else v


def check_classes(what, got, full, k, labels):
    """got: the [rows, k] BYTES array a client returned."""
    expect(got is not None, "%s: no output" % what)
    expect(got.shape == (full.shape[0], k), "%s: shape %r, want %r"
           % (what, got.shape, (full.shape[0], k)))
    for r in range(full.shape[0]):
        want = expected_classes(full[r], k, labels)
        have = [as_text(v) for v in got[r]]
        if have != want:
            raise CheckFailed("%s, row %d: got %r, want %r (full row %r)"
                              % (what, r, have, want, full[r].tolist()))
        for s in have:   # the format itself, read back as a client would
            parts = s.split(":", 2)
            i = int(parts[1])
            expect(round(float(parts[0]), 6) == round(float(full[r][i]), 6),
                   "%s: %r does not hold the value %r to 6 decimals" % (what, s, full[r][i]))
            expect(len(parts) == (3 if labels else 2), "%s: %r" % (what, s))


def http_infer(client, model, x, binary, k):
    inp = httpclient.InferInput("input", list(x.shape), "FP32")
    inp.set_data_from_numpy(x, binary_data=binary)
    out = httpclient.InferRequestedOutput("output", binary_data=binary, class_count=k)
    res = client.infer(model, [inp], outputs=[out])
    meta = res.get_output("output")
    return res.as_numpy("output"), meta


def grpc_infer(client, model, x, k):
    inp = grpcclient.InferInput("input", list(x.shape), "FP32")
    inp.set_data_from_numpy(x)
    out = grpcclient.InferRequestedOutput("output", class_count=k)
    res = client.infer(model, [inp], outputs=[out], client_timeout=10)
    return res.as_numpy("output"), res.get_output("output")


def check_topk(a, models, x):
    http = httpclient.InferenceServerClient(a.http, network_timeout=10.0)
    grpcc = grpcclient.InferenceServerClient(a.grpc)
    for model, labels in models:
        full, _ = http_infer(http, model, x, True, 0)
        expect(full.dtype == np.float32 and full.shape == (len(x), 10),
               "%s: the full output %r %r" % (model, full.dtype, full.shape))
        gfull, _ = grpc_infer(grpcc, model, x, 0)
        expect(np.array_equal(full, gfull), "%s: gRPC's full output differs from HTTP's" % model)
        for k in (1, 3, 10):
            for binary in (False, True):
                what = "%s HTTP %s k=%d" % (model, "binary" if binary else "JSON", k)
                got, meta = http_infer(http, model, x, binary, k)
                expect(meta["datatype"] == "BYTES", "%s: datatype %r" % (what, meta))
                expect(("binary_data_size" in meta.get("parameters", {})) == binary,
                       "%s: binary_data_size in %r" % (what, meta))
                check_classes(what, got, full, k, labels)
            what = "%s gRPC k=%d" % (model, k)
            got, meta = grpc_infer(grpcc, model, x, k)
            expect(meta.datatype == "BYTES" and list(meta.shape) == [len(x), k],
                   "%s: %s %r" % (what, meta.datatype, list(meta.shape)))
            check_classes(what, got, full, k, labels)
        ok("%s: top 1, 3, 10 of %d rows over HTTP JSON, HTTP binary and gRPC equal the sorted "
           "full output%s" % (model, len(x), ", with labels" if labels else ""))
    grpcc.close()


def http_raw(a, model, params, x):
    body = json.dumps({"inputs": [{"name": "input", "datatype": "FP32", "shape": list(x.shape),
                                   "data": x.flatten().tolist()}],
                       "outputs": [{"name": "output", "parameters": params}]}).encode()
    req = urllib.request.Request("http://%s/v2/models/%s/infer" % (a.http, model), data=body,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def check_refused(a, model, x):
    bad = ((0, "must be an integer >= 1 (how many classes to answer), got 0"),
           (11, "11 classes asked, but output \"output\" has 10 elements per row"),
           ("x", "must be an integer >= 1 (how many classes to answer), got a string"),
           (2.5, "got a fraction"))
    for k, msg in bad:
        status, body = http_raw(a, model, {"classification": k}, x)
        expect(status == 400 and msg in body.get("error", ""),
               "HTTP classification %r: %d %r, want 400 with %r" % (k, status, body, msg))
        expect("outputs[0].parameters.classification" in body["error"], body["error"])
    # tritonclient sends k > size as asked (0 it leaves out: no classification).
    http = httpclient.InferenceServerClient(a.http, network_timeout=10.0)
    try:
        http_infer(http, model, x, True, 11)
        raise CheckFailed("HTTP class_count=11 was answered")
    except InferenceServerException as e:
        expect(e.status() == "400" and "11 classes asked" in e.message(),
               "HTTP class_count=11: %r %r" % (e.status(), e.message()))
    ok("HTTP: classification 0, 11 (of 10), \"x\" and 2.5 are 400 naming the parameter")

    grpcc = grpcclient.InferenceServerClient(a.grpc)
    try:
        grpc_infer(grpcc, model, x, 11)
        raise CheckFailed("gRPC class_count=11 was answered")
    except InferenceServerException as e:
        expect(e.status() == "StatusCode.INVALID_ARGUMENT" and "11 classes asked" in e.message(),
               "gRPC class_count=11: %r %r" % (e.status(), e.message()))
    grpcc.close()
    # What tritonclient cannot send: the stub, with each kind of parameter.
    stub = service_pb2_grpc.GRPCInferenceServiceStub(grpc.insecure_channel(a.grpc))
    for setter, msg in ((lambda p: setattr(p, "int64_param", 0), "got 0"),
                        (lambda p: setattr(p, "string_param", "x"), "got a string"),
                        (lambda p: setattr(p, "bool_param", True), "got a boolean")):
        req = service_pb2.ModelInferRequest(model_name=model)
        req.inputs.add(name="input", datatype="FP32", shape=list(x.shape))
        req.raw_input_contents.append(x.astype(np.float32).tobytes())
        o = req.outputs.add(name="output")
        setter(o.parameters["classification"])
        try:
            stub.ModelInfer(req, timeout=10)
            raise CheckFailed("gRPC classification (%s) was answered" % msg)
        except grpc.RpcError as e:
            expect(e.code() == grpc.StatusCode.INVALID_ARGUMENT and msg in e.details() and
                   "classification" in e.details(),
                   "gRPC classification: %s %r, want INVALID_ARGUMENT with %r"
                   % (e.code(), e.details(), msg))
    ok("gRPC: class_count 11 (of 10), int64 0, string \"x\", bool are INVALID_ARGUMENT")


def check_config(a, model, labels_name, plain):
    grpcc = grpcclient.InferenceServerClient(a.grpc)
    for m, want in ((model, labels_name), (plain, None)):
        with urllib.request.urlopen("http://%s/v2/models/%s/config" % (a.http, m),
                                    timeout=10) as r:
            hc = json.loads(r.read())
        expect(hc["output"][0].get("label_filename") == want,
               "HTTP config output of %s: %r" % (m, hc["output"]))
        cfg = grpcc.get_model_config(m, as_json=True)["config"]
        expect(cfg["output"][0].get("label_filename", None) in ((want,) if want else (None, "")),
               "gRPC config output of %s: %r" % (m, cfg["output"]))
    grpcc.close()
    ok("model config (HTTP and gRPC) names the output's label_filename %r, none without"
       % labels_name)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--http", required=True)
    ap.add_argument("--grpc", required=True)
    ap.add_argument("--labels", required=True, help="MODEL=PATH of its labels file")
    ap.add_argument("--plain", required=True)
    ap.add_argument("--rows", required=True)
    a = ap.parse_args()
    lmodel, lpath = a.labels.split("=", 1)
    with open(lpath, encoding="utf-8") as f:
        labels = f.read().split("\n")
    x = np.asarray(json.loads(a.rows), dtype=np.float32)
    try:
        check_topk(a, [(lmodel, labels), (a.plain, None)], x)
        check_refused(a, lmodel, x[:2])
        check_config(a, lmodel, "labels.txt", a.plain)
    except (CheckFailed, InferenceServerException, grpc.RpcError) as e:
        print("FAIL: %s" % (e,), flush=True)
        sys.exit(1)


if __name__ == "__main__":
    main()
