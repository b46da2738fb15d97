"""tokenizer_ref.py - Hugging Face's tokenizers on the same input as
tests/tools/bg_tokenize.c, printing the same lines, for test_tokenizer.py.
Run with the test venv's interpreter (scripts/fetch-testdeps).

    tokenizer_ref.py ids   TOKENIZER_JSON MAX_LEN TEXTS    ids per text
    tokenizer_ref.py words TOKENIZER_JSON TEXTS            normalizer + pre-tokenizer words
    tokenizer_ref.py bench TOKENIZER_JSON MAX_LEN ROUNDS TEXTS [THREADS]

TEXTS holds one JSON string a line. The truncation is MAX_LEN, as the
caller sets it (a sentence-transformers model's max_seq_length), not the
file's; no padding. `words` prints a word longer than the model's
max_input_chars_per_word as its length, as bg-tokenize --words does (it
does not keep such words); texts there hold no added tokens.
`bench` times encode_batch over all texts, ROUNDS times, on THREADS
threads (default 1: RAYON_NUM_THREADS, set before the library starts its
pool), and prints the tokens per second.
"""

import json
import os
import sys
import time


def read(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def load(path, max_len):
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(path)
    tok.no_padding()
    if max_len:
        tok.enable_truncation(max_len)
    return tok


def main():
    mode = sys.argv[1]
    if mode == "ids":
        tok = load(sys.argv[2], int(sys.argv[3]))
        out = []
        for t in read(sys.argv[4]):
            out.append(" ".join(str(i) for i in tok.encode(t).ids))
        sys.stdout.write("\n".join(out) + "\n")
    elif mode == "words":
        tok = load(sys.argv[2], 0)
        with open(sys.argv[2], encoding="utf-8") as f:
            max_chars = json.load(f)["model"]["max_input_chars_per_word"]
        out = []
        for t in read(sys.argv[3]):
            words = tok.pre_tokenizer.pre_tokenize_str(tok.normalizer.normalize_str(t))
            out.append(json.dumps([w if len(w) <= max_chars else len(w) for w, _ in words],
                                  ensure_ascii=False, separators=(",", ":")))
        sys.stdout.write("\n".join(out) + "\n")
    elif mode == "bench":
        path, max_len, rounds, texts = sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), read(sys.argv[5])
        threads = sys.argv[6] if len(sys.argv) > 6 else "1"
        if os.environ.get("RAYON_NUM_THREADS") != threads:
            # Rayon reads its thread count once, when its pool starts.
            os.execve(sys.executable, [sys.executable] + sys.argv,
                      dict(os.environ, RAYON_NUM_THREADS=threads))
        tok = load(path, max_len)
        tokens = rounds * sum(len(e.ids) for e in tok.encode_batch(texts))   # and warm
        t0 = time.perf_counter()
        for _ in range(rounds):
            tok.encode_batch(texts)
        secs = time.perf_counter() - t0
        print("threads %s texts %d rounds %d tokens %d seconds %.3f tokens_per_s %.0f"
              % (threads, len(texts), rounds, tokens, secs, tokens / secs))
    else:
        sys.exit("tokenizer_ref.py: unknown mode %r" % mode)


if __name__ == "__main__":
    main()
