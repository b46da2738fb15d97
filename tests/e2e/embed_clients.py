"""embed_clients.py - the real clients against an encoder model, run by
test_embeddings.py under the test venv (scripts/fetch-testdeps): OpenAI's
`openai` package on /v1/embeddings (floats, its default base64, lists, token
ids, and the exceptions it raises on our errors) and Triton's tritonclient
(HTTP) with a BYTES input, binary both ways and JSON. Prints one JSON object
of what they got; test_embeddings.py checks it.

    python embed_clients.py PORT MODEL TEXT..."""

import json
import sys

import numpy as np
import openai
import tritonclient.http as httpclient


def main():
    port, model, texts = int(sys.argv[1]), sys.argv[2], sys.argv[3:]
    out = {}
    c = openai.OpenAI(base_url="http://127.0.0.1:%d/v1" % port, api_key="unused", max_retries=0)
    r = c.embeddings.create(model=model, input=texts)          # the client asks for base64
    out["openai_default"] = [d.embedding for d in r.data]
    out["openai_usage"] = [r.usage.prompt_tokens, r.usage.total_tokens]
    r = c.embeddings.create(model=model, input=texts, encoding_format="float")
    out["openai_float"] = [d.embedding for d in r.data]
    r = c.embeddings.create(model=model, input=texts[0])
    out["openai_one"] = r.data[0].embedding
    errors = {}
    for name, kw in (("unknown_model", {"model": "nope", "input": "x"}),
                     ("dimensions", {"model": model, "input": "x", "dimensions": 3}),
                     ("too_long", {"model": model, "input": "word " * 600,
                                   "extra_body": {"truncate": False}})):
        try:
            c.embeddings.create(**kw)
            errors[name] = None
        except openai.APIStatusError as e:
            body = e.body if isinstance(e.body, dict) else {}
            errors[name] = {"class": type(e).__name__, "status": e.status_code,
                            "message": e.message, "param": body.get("param")}
    out["openai_errors"] = errors

    t = httpclient.InferenceServerClient("127.0.0.1:%d" % port)
    data = np.array([[s.encode()] for s in texts], dtype=np.object_)
    for binary in (True, False):
        inp = httpclient.InferInput("text", list(data.shape), "BYTES")
        inp.set_data_from_numpy(data, binary_data=binary)
        want = httpclient.InferRequestedOutput("embedding", binary_data=binary)
        res = t.infer(model, [inp], outputs=[want])
        out["triton_binary" if binary else "triton_json"] = res.as_numpy("embedding").tolist()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
