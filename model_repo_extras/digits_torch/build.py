"""Export the ``digits`` classifier as TorchScript for the PyTorch backend: ``digits_torch``.

The weights are not trained again: the network of ``digits/build.py`` is created and its state is
filled from the initializers of ``digits/1/model.onnx`` (their names are the torch parameter names
the ONNX export kept), so both models compute the same function. The module is compiled with
``torch.jit.script`` (its ``forward`` parameter is called ``input``, the config's input name), saved
with ``torch.jit.save`` and checked against onnxruntime on the held-out test set.

Run from the repository root (needs torch; ``pip install torch==2.13.0``)::

    python model_repo_extras/digits_torch/build.py
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import torch
from onnx import numpy_helper

HERE = Path(__file__).resolve().parent
DIGITS = HERE.parents[1] / "model_repo" / "digits"
TOLERANCE = 1e-4  # max |torch - onnxruntime| logit difference accepted


def digits_build():
    """The ``digits`` build script as a module (model_repo/ is not a package)."""
    spec = importlib.util.spec_from_file_location("digits_build", DIGITS / "build.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def network_from_onnx(model: onnx.ModelProto) -> torch.nn.Module:
    """The digits network with its weights copied from the ONNX model's initializers."""
    network = digits_build().build_network()
    weights = {init.name: torch.from_numpy(numpy_helper.to_array(init).copy()) for init in model.graph.initializer}
    network.load_state_dict(weights, strict=True)
    return network.eval()


def main() -> int:
    onnx_file = DIGITS / "1" / "model.onnx"
    network = network_from_onnx(onnx.load(str(onnx_file)))
    scripted = torch.jit.script(network)
    target = HERE / "1" / "model.pt"
    target.parent.mkdir(exist_ok=True)
    torch.jit.save(scripted, str(target))

    inputs, labels = digits_build().load_test_set(DIGITS / "test_split.npz")
    reloaded = torch.jit.load(str(target))
    with torch.inference_mode():
        got = reloaded(torch.from_numpy(inputs)).numpy()
    expected = ort.InferenceSession(str(onnx_file), providers=["CPUExecutionProvider"]).run(None, {"input": inputs})[0]
    difference = float(np.abs(got - expected).max())
    accuracy = float((got.argmax(axis=1) == labels).mean())
    print(
        f"wrote {target} ({target.stat().st_size} bytes): max |torch - onnxruntime| {difference:.2e} "
        f"on {len(labels)} test images, accuracy {accuracy:.4f}"
    )
    if difference > TOLERANCE:
        print(f"difference above {TOLERANCE}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
