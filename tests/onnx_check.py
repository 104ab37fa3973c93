"""Runs an exported ONNX policy in onnxruntime on the inputs a C++ test wrote and compares
its outputs with the project's forward (tests/onnx_test.cc). Usage: onnx_check.py DIR.
Prints the largest absolute difference per output; exits 1 when one exceeds the tolerance."""
import json
import sys

import numpy as np
import onnxruntime as ort

d = sys.argv[1]
meta = json.load(open(f"{d}/meta.json"))
sess = ort.InferenceSession(f"{d}/model.onnx", providers=["CPUExecutionProvider"])
feeds = {}
for name, spec in meta["inputs"].items():
    feeds[name] = np.fromfile(f"{d}/{name}.bin", dtype=spec["dtype"]).reshape(spec["shape"])
names = list(meta["outputs"].keys())
got = dict(zip(names, sess.run(names, feeds)))
worst = 0.0
for name, spec in meta["outputs"].items():
    want = np.fromfile(f"{d}/{name}.bin", dtype=np.float32).reshape(spec["shape"])
    if got[name].shape != want.shape:
        print(f"{name}: shape {got[name].shape}, expected {want.shape}")
        sys.exit(1)
    err = float(np.max(np.abs(got[name] - want)))
    scale = float(np.max(np.abs(want))) + 1e-6
    print(f"{name}: max |onnx - stampede| = {err:.3g} (largest value {scale:.3g})")
    worst = max(worst, err / scale)
sys.exit(0 if worst < meta["tolerance"] else 1)
