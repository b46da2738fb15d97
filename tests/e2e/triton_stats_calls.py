"""triton_stats_calls.py - a known mix of inference requests sent with
Triton's own clients (tritonclient.http and tritonclient.grpc, unmodified),
then the statistics read back through both clients' get_inference_statistics,
for one model and for all. Not a test module: it needs tritonclient and
numpy, so it runs under the interpreter of the virtual environment that
scripts/fetch-testdeps makes, started by test_triton_stats.py, which owns the
server, checks the numbers and keeps this script to the clients' calls:

    VENV/bin/python triton_stats_calls.py --url 127.0.0.1:PORT \\
        --grpc-url 127.0.0.1:PORT --model NAME --http-rows 1,3,... --grpc-rows 1,2,...

Requests of each list go out at once (one thread and one client each) so
that they share batches. Prints one JSON object: {"http_one", "http_all",
"grpc_one", "grpc_all"} (the gRPC ones as the client's as_json dicts), or
"FAIL: ..." and exit 1."""

import argparse
import json
import sys
import threading

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient


def infer_all(make_client, mod, model, rows_list):
    """Sends one request per entry of rows_list at once; raises on any error."""
    errors = []
    start = threading.Barrier(len(rows_list))

    def one(rows):
        try:
            client = make_client()
            x = np.full((rows, 4), 0.5, dtype=np.float32)
            inp = mod.InferInput("x", list(x.shape), "FP32")
            inp.set_data_from_numpy(x)
            start.wait(timeout=10)
            res = client.infer(model, [inp])
            y = res.as_numpy("y")
            if y is None or y.shape[0] != rows:
                errors.append("%d rows: answer %r" % (rows, None if y is None else y.shape))
        except Exception as e:   # noqa: BLE001 - reported to the test as it is
            errors.append("%d rows: %r" % (rows, e))

    threads = [threading.Thread(target=one, args=(r,)) for r in rows_list]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    if errors:
        raise RuntimeError("; ".join(errors))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--grpc-url", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--http-rows", required=True)
    ap.add_argument("--grpc-rows", required=True)
    a = ap.parse_args()
    http_rows = [int(v) for v in a.http_rows.split(",")]
    grpc_rows = [int(v) for v in a.grpc_rows.split(",")]
    try:
        infer_all(lambda: httpclient.InferenceServerClient(a.url, network_timeout=30),
                  httpclient, a.model, http_rows)
        infer_all(lambda: grpcclient.InferenceServerClient(a.grpc_url), grpcclient, a.model,
                  grpc_rows)
        h = httpclient.InferenceServerClient(a.url)
        g = grpcclient.InferenceServerClient(a.grpc_url)
        out = {
            "http_one": h.get_inference_statistics(a.model),
            "http_all": h.get_inference_statistics(),
            "grpc_one": g.get_inference_statistics(a.model, as_json=True),
            "grpc_all": g.get_inference_statistics(as_json=True),
        }
    except Exception as e:   # noqa: BLE001
        print("FAIL: %r" % (e,))
        return 1
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
