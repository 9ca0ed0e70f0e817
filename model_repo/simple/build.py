"""Build the ``simple`` example model: element-wise add and subtract of INT32 vectors.

This mirrors the shape of Triton's classic "simple" example and exists for
smoke tests and client examples: two INT32 inputs ``INPUT0`` and ``INPUT1`` of
16 elements each (plus a dynamic batch dimension), and two outputs,
``OUTPUT0 = INPUT0 + INPUT1`` and ``OUTPUT1 = INPUT0 - INPUT1``.

The graph is written directly with ``onnx.helper`` (no training, no torch), so
rebuilding is byte-for-byte deterministic.

Run from the repository root::

    python model_repo/simple/build.py

It writes ``1/model.onnx`` next to this script and checks the result with
onnxruntime.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper

HERE = Path(__file__).resolve().parent
OPSET = 17
IR_VERSION = 9
WIDTH = 16


def build_model() -> onnx.ModelProto:
    """Return the ONNX model: OUTPUT0 = INPUT0 + INPUT1, OUTPUT1 = INPUT0 - INPUT1."""
    shape: list[str | int] = ["batch", WIDTH]
    inputs = [
        helper.make_tensor_value_info("INPUT0", TensorProto.INT32, shape),
        helper.make_tensor_value_info("INPUT1", TensorProto.INT32, shape),
    ]
    outputs = [
        helper.make_tensor_value_info("OUTPUT0", TensorProto.INT32, shape),
        helper.make_tensor_value_info("OUTPUT1", TensorProto.INT32, shape),
    ]
    nodes = [
        helper.make_node("Add", ["INPUT0", "INPUT1"], ["OUTPUT0"], name="add"),
        helper.make_node("Sub", ["INPUT0", "INPUT1"], ["OUTPUT1"], name="sub"),
    ]
    graph = helper.make_graph(nodes, "simple", inputs, outputs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="ferry-model-repo")
    model.ir_version = IR_VERSION
    onnx.checker.check_model(model, full_check=True)
    return model


def verify(path: Path) -> None:
    """Run the saved model with onnxruntime on a batch of 2 and compare with numpy."""
    import onnxruntime as ort

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    a = rng.integers(-1000, 1000, size=(2, WIDTH), dtype=np.int32)
    b = rng.integers(-1000, 1000, size=(2, WIDTH), dtype=np.int32)
    out0, out1 = session.run(["OUTPUT0", "OUTPUT1"], {"INPUT0": a, "INPUT1": b})
    assert out0.dtype == np.int32 and out1.dtype == np.int32
    np.testing.assert_array_equal(out0, a + b)
    np.testing.assert_array_equal(out1, a - b)


def main() -> None:
    path = HERE / "1" / "model.onnx"
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(build_model(), str(path))
    verify(path)
    print(f"wrote {path} ({path.stat().st_size} bytes); onnxruntime check passed")


if __name__ == "__main__":
    main()
