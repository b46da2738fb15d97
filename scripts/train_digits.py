#!/usr/bin/env python3
"""Train and export batchgate's bundled demo model, ``models/digits``.

Run by hand by a developer, not by the build. Needs (CPU only)::

    pip install scikit-learn safetensors numpy

Data: the 8x8 handwritten digits scikit-learn ships with the package
(``sklearn.datasets.load_digits``: the test set of the UCI "Optical
Recognition of Handwritten Digits" data, 1797 images of 64 pixels, each an
integer 0..16). Nothing is downloaded.

Input scaling: the model's input is the 64 pixels in row-major order divided
by 16, i.e. FP32 values k/16 in [0, 1]. Raw 0..16 pixels must be divided by 16
by the client before they are sent to the gateway.

Split: stratified 80/20 train / held-out split with a fixed seed (SEED). The
held-out rows are never seen by training; they are exported to heldout.json
for the gateway's end-to-end accuracy test.

Model: a scikit-learn MLPClassifier, 64 -> 128 (relu) -> 10 -> softmax,
exported in PyTorch ``nn.Linear`` layout, with the tensor names that
``nn.Sequential(Linear(64,128), ReLU(), Linear(128,10), Softmax(-1))
.state_dict()`` would produce::

    0.weight [128, 64]   0.bias [128]
    2.weight [10, 128]   2.bias [10]

MLPClassifier stores ``coefs_[i]`` as [in, out]; they are transposed to
nn.Linear's [out, in] (y = x @ W.T + b). All tensors are F32.

Files written to the output folder (default: models/digits next to this
script's parent folder):

    config.json         gateway model config (layers match the tensors)
    labels.txt          the output's class names, one a line
    model.safetensors   the weights
    heldout.json        {"description", "input_scale", "inputs", "labels"}
    README.md           what the model is and how its input is scaled

After writing, the script checks its own export: it reloads model.safetensors
with the safetensors package, runs a pure-numpy forward pass driven by the
layers in config.json on the train and held-out inputs, prints the accuracies
(asserting they equal the trained model's) and the file sizes, and prints a
few held-out rows' probabilities for comparison by hand.

Usage::

    python3 scripts/train_digits.py [--out DIR]
"""

import argparse
import json
import os
import sys

import numpy as np
from safetensors.numpy import load_file, save_file
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from sklearn.neural_network import MLPClassifier

SEED = 20240611
TEST_FRACTION = 0.2
HIDDEN = (128,)
INPUT_SCALE = 16.0

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def train():
    digits = load_digits()
    x = (digits.data / INPUT_SCALE).astype(np.float32)  # k/16, exact in FP32
    y = digits.target.astype(np.int64)
    assert x.shape == (1797, 64), x.shape

    x_tr, x_ho, y_tr, y_ho = train_test_split(
        x, y, test_size=TEST_FRACTION, stratify=y, random_state=SEED)

    clf = MLPClassifier(hidden_layer_sizes=HIDDEN, activation="relu",
                        solver="adam", alpha=1e-4, batch_size=64,
                        learning_rate_init=1e-3, max_iter=500,
                        tol=1e-5, n_iter_no_change=10,
                        random_state=SEED)
    clf.fit(x_tr, y_tr)
    assert list(clf.classes_) == list(range(10)), clf.classes_
    assert clf.out_activation_ == "softmax", clf.out_activation_
    return clf, (x_tr, y_tr), (x_ho, y_ho)


def export(clf, out_dir):
    """Weights in nn.Linear layout, named as nn.Sequential with ReLUs between."""
    tensors = {}
    layers = []
    n = len(clf.coefs_)
    for i, (w, b) in enumerate(zip(clf.coefs_, clf.intercepts_)):
        idx = 2 * i  # Linear, ReLU, Linear, ReLU, ..., Linear
        wname, bname = f"{idx}.weight", f"{idx}.bias"
        tensors[wname] = np.ascontiguousarray(w.T, dtype=np.float32)  # [out, in]
        tensors[bname] = np.ascontiguousarray(b, dtype=np.float32)
        layer = {"type": "dense", "weight": wname, "bias": bname}
        if i < n - 1:
            layer["activation"] = "relu"
        layers.append(layer)
    layers.append({"type": "softmax"})

    save_file(tensors, os.path.join(out_dir, "model.safetensors"))

    config = {
        "name": "digits",
        "backend": "auto",
        "inputs": [{"name": "input", "datatype": "FP32", "shape": [64]}],
        "outputs": [{"name": "output", "datatype": "FP32", "shape": [10],
                     "labels": "labels.txt"}],
        "layers": layers,
        "batching": {"max_batch_size": 64, "preferred_batch_sizes": [],
                     "max_queue_delay_us": 1000, "latency_budget_ms": 0,
                     "max_queue_size": 4096},
        "instances": {"count": 1, "devices": []},
    }
    # Exactly the fields of the model config schema (unknown fields are
    # errors to the gateway), laid out one short line per item. The input
    # scaling (pixels / 16) is documented in README.md and heldout.json.
    def line(key, value):
        if isinstance(value, list) and value and isinstance(value[0], dict):
            items = ",\n".join("    " + json.dumps(v) for v in value)
            return f"  {json.dumps(key)}: [\n{items}\n  ]"
        return f"  {json.dumps(key)}: {json.dumps(value)}"
    text = "{\n" + ",\n".join(line(k, v) for k, v in config.items()) + "\n}\n"
    assert json.loads(text) == config
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        f.write(text)
    # The output's class names, one a line (Triton's classification
    # extension answers "value:index:label" with them). Words, so that a
    # label is never mistaken for the index beside it.
    with open(os.path.join(out_dir, "labels.txt"), "w") as f:
        f.write("".join(name + "\n" for name in DIGIT_NAMES))
    return config


DIGIT_NAMES = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"]


def fmt6(v):
    """A float with at most 6 significant digits, as a JSON number."""
    r = float(f"{float(v):.6g}")
    return repr(r)


def write_heldout(x_ho, y_ho, out_dir):
    description = (
        "Held-out rows of sklearn.datasets.load_digits (UCI optical digits "
        "test set, 8x8 images, pixels 0..16) that the digits model never saw "
        f"in training: stratified {int(TEST_FRACTION * 100)}% split, "
        f"train_test_split(random_state={SEED}), {len(y_ho)} rows. Each input "
        "is the 64 pixels in row-major order divided by 16; labels are the "
        "digits 0..9. Written by scripts/train_digits.py.")
    # One row per line: readable and diff-friendly, still small.
    rows = ",\n    ".join("[" + ",".join(fmt6(v) for v in row) + "]"
                          for row in x_ho)
    text = ("{\n"
            f"  \"description\": {json.dumps(description)},\n"
            "  \"input_scale\": \"pixels / 16\",\n"
            f"  \"inputs\": [\n    {rows}\n  ],\n"
            f"  \"labels\": {json.dumps([int(v) for v in y_ho])}\n"
            "}\n")
    path = os.path.join(out_dir, "heldout.json")
    with open(path, "w") as f:
        f.write(text)
    # Must parse back to exactly the held-out data.
    with open(path) as f:
        back = json.load(f)
    assert np.array_equal(np.asarray(back["inputs"], dtype=np.float32), x_ho)
    assert back["labels"] == [int(v) for v in y_ho]


def write_readme(out_dir, hidden, n_train, n_ho):
    arch = " -> ".join(["64"] + [f"{h} (relu)" for h in hidden] + ["10", "softmax"])
    text = f"""# digits: bundled demo model

An MLP classifier for the 8x8 handwritten digits that scikit-learn ships
(`sklearn.datasets.load_digits`, the UCI optical digits test set).
Produced by `scripts/train_digits.py` (fixed seed {SEED}); do not edit by hand.

- Architecture: {arch}; weights in PyTorch `nn.Linear` layout (`[out, in]`),
  F32, named as `nn.Sequential(...).state_dict()` names them.
- **Input** (`input`, FP32, `[64]`): the 64 pixels in row-major order
  **divided by 16**, so every value is k/16 in [0, 1]. Raw 0..16 pixels must
  be scaled by the client.
- **Output** (`output`, FP32, `[10]`): class probabilities for digits 0..9
  (softmax); the prediction is the argmax.
- `labels.txt`: the output's class names, `zero` .. `nine`, one a line
  (config.json's `"labels"`): an output asked with `classification: k`
  answers `"0.998120:3:three"`.
- `heldout.json`: the {n_ho} held-out rows never used in training (stratified
  80/20 split; {n_train} rows trained on), already scaled, with their labels.
"""
    with open(os.path.join(out_dir, "README.md"), "w") as f:
        f.write(text)


# ---- verification: pure numpy, nn.Linear layout, driven by config.json ----

def softmax(z):
    z = z - z.max(axis=1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=1, keepdims=True)


ACTIVATIONS = {
    None: lambda z: z,
    "relu": lambda z: np.maximum(z, 0),
    "tanh": np.tanh,
    "sigmoid": lambda z: 1 / (1 + np.exp(-z)),
}


def numpy_forward(config, tensors, x):
    h = np.asarray(x, dtype=np.float32)
    for layer in config["layers"]:
        if layer["type"] == "dense":
            w = tensors[layer["weight"]]
            b = tensors[layer["bias"]]
            assert w.dtype == np.float32 and b.dtype == np.float32
            assert w.shape == (b.shape[0], h.shape[1]), (w.shape, h.shape)
            h = ACTIVATIONS[layer.get("activation")](h @ w.T + b)
        elif layer["type"] == "softmax":
            h = softmax(h)
        else:
            raise ValueError(layer["type"])
    return h


def verify(clf, train, heldout, out_dir):
    with open(os.path.join(out_dir, "config.json")) as f:
        config = json.load(f)
    tensors = load_file(os.path.join(out_dir, "model.safetensors"))
    print("tensors:", ", ".join(f"{k} {list(v.shape)} {v.dtype}"
                                for k, v in sorted(tensors.items())))
    used = {layer[k] for layer in config["layers"] for k in ("weight", "bias")
            if k in layer}
    assert used == set(tensors), (used, set(tensors))

    for name, (x, y) in (("train", train), ("held-out", heldout)):
        probs = numpy_forward(config, tensors, x)
        assert probs.shape == (len(x), 10)
        np_acc = float(np.mean(probs.argmax(axis=1) == y))
        sk_acc = float(clf.score(x, y))
        sk_probs = clf.predict_proba(x)
        diff = float(np.abs(probs - sk_probs).max())
        print(f"{name:9s} rows={len(y):4d}  numpy accuracy={np_acc:.4f}  "
              f"sklearn accuracy={sk_acc:.4f}  max |p_numpy - p_sklearn|={diff:.2e}")
        assert np_acc == sk_acc, (name, np_acc, sk_acc)
        assert diff < 1e-4, diff

    x_ho, y_ho = heldout
    probs = numpy_forward(config, tensors, x_ho)
    wrong = [int(i) for i in np.flatnonzero(probs.argmax(axis=1) != y_ho)]
    np.set_printoptions(precision=6, suppress=False, linewidth=200)
    print("held-out rows 0..4 and every misclassified one "
          "(numpy probabilities for digits 0..9):")
    for i in sorted(set(range(5)) | set(wrong)):
        print(f"  row {i:3d}: label={y_ho[i]} argmax={probs[i].argmax()} "
              f"p={probs[i]}")

    for fn in ("config.json", "model.safetensors", "heldout.json", "README.md"):
        print(f"{fn:18s} {os.path.getsize(os.path.join(out_dir, fn)):8d} bytes")
    return float(np.mean(numpy_forward(config, tensors, x_ho).argmax(1) == y_ho))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(REPO, "models", "digits"),
                    help="output folder (default: %(default)s)")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)

    clf, train_set, heldout_set = train()
    print(f"trained MLPClassifier hidden={HIDDEN} seed={SEED}: "
          f"{clf.n_iter_} epochs, final loss {clf.loss_:.5f}")
    export(clf, args.out)
    write_heldout(*heldout_set, args.out)
    write_readme(args.out, HIDDEN, len(train_set[1]), len(heldout_set[1]))
    acc = verify(clf, train_set, heldout_set, args.out)
    if acc < 0.97:
        print(f"held-out accuracy {acc:.4f} is below the 0.97 target",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
