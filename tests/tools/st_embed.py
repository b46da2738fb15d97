"""st_embed.py - sentence-transformers' embeddings of a model folder, the
reference batchgate's encoder (#20) is compared with, and its timings.
Runs in the reference venv (scripts/fetch-reference: torch and
sentence-transformers, pinned):

    REF=${BATCHGATE_CACHE:-$HOME/.cache/batchgate}/ref-venv/bin/python
    $REF tests/tools/st_embed.py MODEL_DIR SENTENCES OUT [--batch-size 32] [--threads 2]
    $REF tests/tools/st_embed.py MODEL_DIR SENTENCES --bench [--batches 1,8,32,64,128]
                                 [--threads 2] [--rounds 1]

MODEL_DIR: a Hugging Face sentence-transformers folder (modules.json,
config.json, model.safetensors, tokenizer.json...), loaded as
SentenceTransformer(MODEL_DIR) does: truncation at its max_seq_length, its
pooling, its Normalize module when modules.json has one. Offline: nothing is
fetched from the Hub.

SENTENCES: a JSON array of strings, or JSON Lines with one string a line
(what tests/data/sentences.py and bg-tokenize read and write).

OUT (embedding): the embeddings as float32, one row a sentence, in the order
given: OUT.npy as a NumPy array of shape (sentences, dim); any other name
as JSON: {"model", "dim", "max_seq_length", "torch", "sentence_transformers",
"threads", "tokens": [...], "tokens_untruncated": [...], "embeddings":
[[...], ...]} (each float the shortest decimal that reads back as the same
float32). stdout: each sentence's token count, one a line ([CLS] and [SEP]
included, after the cut at max_seq_length); stderr: a summary.

--bench: encodes all the sentences with encode(batch_size=B) for each B of
--batches (sentence-transformers sorts them by length within the call, as
its users get it), after a warm-up batch, and each sentence alone for the
batch-of-one latency. Prints one line a batch size, then a JSON line
{"bench": {...}} with sentences/s per batch size, the p50 and p90 of the
batch-of-one latency in ms, torch.get_num_threads() and the versions.

--threads (default 2, the CI machine's cores): torch.set_num_threads; the
count in effect is recorded either way. Exit status 2 on a usage error or
outside the reference venv.
"""

import argparse
import json
import os
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

try:
    import numpy as np
    import torch
    import sentence_transformers
    from sentence_transformers import SentenceTransformer
except ImportError as e:
    sys.stderr.write("st_embed.py: %s: run it with the reference venv's python "
                     "(scripts/fetch-reference makes it)\n" % e)
    sys.exit(2)


def read_sentences(path):
    with open(path, encoding="utf-8") as f:
        text = f.read()
    if text.lstrip().startswith("["):
        data = json.loads(text)
    else:
        data = [json.loads(line) for line in text.split("\n") if line.strip()]
    if not isinstance(data, list) or not all(isinstance(s, str) for s in data):
        raise SystemExit("st_embed.py: %s: expected a JSON array of strings or one JSON string "
                         "a line" % path)
    return data


def load(model_dir, threads):
    torch.set_num_threads(threads)
    try:
        from transformers.utils import logging as tlog
        tlog.disable_progress_bar()
    except ImportError:
        pass
    model = SentenceTransformer(model_dir, device="cpu")
    model.eval()
    return model


def token_counts(model, sentences):
    """Tokens per sentence as the model sees them, and before the cut."""
    cut, full = [], []
    tok = model.tokenizer
    for i in range(0, len(sentences), 256):
        chunk = sentences[i:i + 256]
        feats = (model.preprocess if hasattr(model, "preprocess") else model.tokenize)(chunk)
        cut += [int(n) for n in feats["attention_mask"].sum(dim=1)]
        full += [len(ids) for ids in tok(chunk, truncation=False, add_special_tokens=True,
                                         verbose=False)["input_ids"]]
    return cut, full


def meta(model, model_dir):
    return {"model": os.path.abspath(model_dir),
            "dim": (model.get_embedding_dimension() if hasattr(model, "get_embedding_dimension")
                    else model.get_sentence_embedding_dimension()),
            "max_seq_length": model.max_seq_length,
            "torch": torch.__version__,
            "sentence_transformers": sentence_transformers.__version__,
            "threads": torch.get_num_threads()}


def embed(args, model, sentences):
    with torch.inference_mode():
        emb = model.encode(sentences, batch_size=args.batch_size, convert_to_numpy=True,
                           show_progress_bar=False)
    emb = np.asarray(emb, dtype=np.float32).reshape(len(sentences), -1)
    cut, full = token_counts(model, sentences)
    if args.out.endswith(".npy"):
        np.save(args.out, emb)
    else:
        doc = meta(model, args.model)
        doc["tokens"] = cut
        doc["tokens_untruncated"] = full
        # float(np.float32) is the double of the same value; repr's shortest
        # digits of it read back as that float32.
        doc["embeddings"] = [[float(x) for x in row] for row in emb]
        tmp = args.out + ".tmp"
        with open(tmp, "w") as f:
            json.dump(doc, f, separators=(",", ":"))
            f.write("\n")
        os.replace(tmp, args.out)
    sys.stdout.write("".join("%d\n" % n for n in cut))
    sys.stderr.write("st_embed.py: %d sentences, dim %d, %d tokens (%d cut at %d), %d threads -> "
                     "%s\n" % (len(sentences), emb.shape[1], sum(cut),
                               sum(1 for a, b in zip(cut, full) if b > a), model.max_seq_length,
                               torch.get_num_threads(), args.out))


def percentile(xs, q):
    xs = sorted(xs)
    if not xs:
        return float("nan")
    k = (len(xs) - 1) * q
    lo = int(k)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def bench(args, model, sentences):
    batches = [int(b) for b in args.batches.split(",")]
    cut, _ = token_counts(model, sentences)
    res = meta(model, args.model)
    res.update({"sentences": len(sentences), "tokens": sum(cut), "rounds": args.rounds,
                "sentences_per_s": {}})

    def run(bs, texts=sentences):
        with torch.inference_mode():
            model.encode(texts, batch_size=bs, convert_to_numpy=True, show_progress_bar=False)

    run(max(batches), sentences[:max(batches)])   # warm-up: allocations, lazy init
    for bs in batches:
        best = None
        for _ in range(args.rounds):
            t = time.perf_counter()
            run(bs)
            dt = time.perf_counter() - t
            best = dt if best is None else min(best, dt)
        rate = len(sentences) / best
        res["sentences_per_s"][str(bs)] = round(rate, 2)
        print("batch %4d: %9.1f sentences/s  %10.0f tokens/s" % (bs, rate, sum(cut) / best),
              flush=True)
    lat = []
    with torch.inference_mode():
        for s in sentences:
            t = time.perf_counter()
            model.encode([s], batch_size=1, convert_to_numpy=True, show_progress_bar=False)
            lat.append((time.perf_counter() - t) * 1e3)
    res["batch1_latency_ms"] = {"p50": round(percentile(lat, 0.5), 3),
                                "p90": round(percentile(lat, 0.9), 3)}
    print("batch-of-one latency: p50 %.2f ms, p90 %.2f ms (%d sentences, %d tokens, %d threads)"
          % (percentile(lat, 0.5), percentile(lat, 0.9), len(sentences), sum(cut),
             torch.get_num_threads()))
    print(json.dumps({"bench": res}), flush=True)


def main():
    ap = argparse.ArgumentParser(prog="st_embed.py",
                                 description="sentence-transformers embeddings and timings")
    ap.add_argument("model")
    ap.add_argument("sentences")
    ap.add_argument("out", nargs="?")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--bench", action="store_true")
    ap.add_argument("--batches", default="1,8,32,64,128")
    ap.add_argument("--rounds", type=int, default=1, help="--bench: the best of this many passes")
    args = ap.parse_args()
    if args.bench == (args.out is not None):
        ap.error("give OUT, or --bench without OUT")
    if args.threads < 1 or args.batch_size < 1 or args.rounds < 1:
        ap.error("--threads, --batch-size and --rounds must be positive")
    sentences = read_sentences(args.sentences)
    model = load(args.model, args.threads)
    if args.bench:
        bench(args, model, sentences)
    else:
        embed(args, model, sentences)


if __name__ == "__main__":
    main()
