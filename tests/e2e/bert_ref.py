"""bert_ref.py - a BERT sentence encoder in numpy, float64: the reference
test_embeddings.py compares batchgate's embeddings with on the small random
model of scripts/gen-tiny-bert, so that CI checks the forward pass without
PyTorch (test_embeddings.py compares with sentence-transformers too, where
scripts/fetch-reference installed it).

    bert_ref.py MODEL_DIR INPUTS.jsonl > OUT.json

Each input line is a JSON string (tokenized with the `tokenizers` package
and cut to max_seq_length as sentence-transformers cuts) or a list of token
ids (taken as they are). The output: {"vectors": [[...], ...], "tokens":
[n, ...]}, pooled as 1_Pooling/config.json says and normalized when
modules.json has a Normalize module. Runs under the test venv
(scripts/fetch-testdeps: numpy, tokenizers)."""

import json
import math
import os
import struct
import sys

import numpy as np
from tokenizers import Tokenizer


def load_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        a, b = t["data_offsets"]
        raw = data[a:b]
        if t["dtype"] == "F32":
            v = np.frombuffer(raw, "<f4")
        elif t["dtype"] == "F16":
            v = np.frombuffer(raw, "<f2")
        elif t["dtype"] == "BF16":
            v = (np.frombuffer(raw, "<u2").astype(np.uint32) << 16).view("<f4")
        else:
            continue
        out[name] = v.astype(np.float64).reshape(t["shape"])
    if "embeddings.word_embeddings.weight" not in out:   # a BertFor* checkpoint
        out = {k[5:] if k.startswith("bert.") else k: v for k, v in out.items()}
    return out


def layer_norm(x, g, b, eps):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * g + b


def gelu(x):
    erf = np.vectorize(math.erf)
    return 0.5 * x * (1.0 + erf(x / math.sqrt(2.0)))


def encode(W, cfg, ids):
    H, nh = cfg["hidden_size"], cfg["num_attention_heads"]
    hd, eps = H // nh, cfg.get("layer_norm_eps", 1e-12)
    n = len(ids)
    x = (W["embeddings.word_embeddings.weight"][ids] +
         W["embeddings.position_embeddings.weight"][:n] +
         W["embeddings.token_type_embeddings.weight"][0])
    x = layer_norm(x, W["embeddings.LayerNorm.weight"], W["embeddings.LayerNorm.bias"], eps)
    for i in range(cfg["num_hidden_layers"]):
        p = "encoder.layer.%d." % i
        lin = lambda v, name: v @ W[p + name + ".weight"].T + W[p + name + ".bias"]
        q = lin(x, "attention.self.query").reshape(n, nh, hd).transpose(1, 0, 2)
        k = lin(x, "attention.self.key").reshape(n, nh, hd).transpose(1, 0, 2)
        v = lin(x, "attention.self.value").reshape(n, nh, hd).transpose(1, 0, 2)
        s = q @ k.transpose(0, 2, 1) / math.sqrt(hd)
        s = np.exp(s - s.max(-1, keepdims=True))
        ctx = ((s / s.sum(-1, keepdims=True)) @ v).transpose(1, 0, 2).reshape(n, H)
        x = layer_norm(x + lin(ctx, "attention.output.dense"),
                       W[p + "attention.output.LayerNorm.weight"],
                       W[p + "attention.output.LayerNorm.bias"], eps)
        h = gelu(lin(x, "intermediate.dense"))
        x = layer_norm(x + lin(h, "output.dense"), W[p + "output.LayerNorm.weight"],
                       W[p + "output.LayerNorm.bias"], eps)
    return x


def main():
    folder, inputs = sys.argv[1], sys.argv[2]
    cfg = json.load(open(os.path.join(folder, "config.json")))
    W = load_safetensors(os.path.join(folder, "model.safetensors"))
    tok = Tokenizer.from_file(os.path.join(folder, "tokenizer.json"))
    tok.no_truncation()
    tok.no_padding()
    max_len = cfg["max_position_embeddings"]
    sb = os.path.join(folder, "sentence_bert_config.json")
    if os.path.exists(sb):
        max_len = json.load(open(sb)).get("max_seq_length", max_len)
    pooling, normalize = "mean", False
    pc = os.path.join(folder, "1_Pooling", "config.json")
    if os.path.exists(pc):
        c = json.load(open(pc))
        pooling = "cls" if c.get("pooling_mode_cls_token") else \
                  "max" if c.get("pooling_mode_max_tokens") else "mean"
    mj = os.path.join(folder, "modules.json")
    if os.path.exists(mj):
        normalize = any(m["type"].endswith("Normalize") for m in json.load(open(mj)))
    vectors, counts = [], []
    for line in open(inputs, encoding="utf-8"):
        item = json.loads(line)
        ids = tok.encode(item).ids if isinstance(item, str) else list(item)
        if len(ids) > max_len:
            ids = ids[:max_len - 1] + ids[-1:]
        x = encode(W, cfg, ids)
        v = x[0] if pooling == "cls" else x.max(0) if pooling == "max" else x.mean(0)
        if normalize:
            v = v / max(np.linalg.norm(v), 1e-12)
        vectors.append([float(f) for f in v])
        counts.append(len(ids))
    json.dump({"vectors": vectors, "tokens": counts}, sys.stdout)


if __name__ == "__main__":
    main()
