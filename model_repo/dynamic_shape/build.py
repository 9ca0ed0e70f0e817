"""Build the ``dynamic_shape`` example model: ``y = x * 2 + 1`` over a variable-length axis.

Used to exercise shape handling: both the batch dimension and the second
dimension are dynamic. In ``config.pbtxt`` the input ``x`` and output ``y``
have ``dims: [ -1 ]`` with ``max_batch_size: 16``, so a request tensor has
shape ``[batch, n]`` for any ``n >= 0``.

The graph is written directly with ``onnx.helper`` (no training), so
rebuilding is byte-for-byte deterministic.

Run from the repository root::

    python model_repo/dynamic_shape/build.py

It writes ``1/model.onnx`` next to this script and checks the result with
onnxruntime.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = Path(__file__).resolve().parent
OPSET = 17
IR_VERSION = 9


def build_model() -> onnx.ModelProto:
    """Return the ONNX model computing ``y = x * 2 + 1`` for x of shape [batch, n]."""
    shape: list[str | int] = ["batch", "n"]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)
    two = numpy_helper.from_array(np.array(2.0, dtype=np.float32), name="two")
    one = numpy_helper.from_array(np.array(1.0, dtype=np.float32), name="one")
    nodes = [
        helper.make_node("Mul", ["x", "two"], ["x_times_two"], name="mul"),
        helper.make_node("Add", ["x_times_two", "one"], ["y"], name="add"),
    ]
    graph = helper.make_graph(nodes, "dynamic_shape", [x], [y], initializer=[two, one])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="ferry-model-repo")
    model.ir_version = IR_VERSION
    onnx.checker.check_model(model, full_check=True)
    return model


def verify(path: Path) -> None:
    """Run the saved model with onnxruntime on several shapes and compare with numpy."""
    import onnxruntime as ort

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    for batch, n in [(1, 1), (2, 5), (16, 37), (3, 0)]:
        x = rng.standard_normal((batch, n)).astype(np.float32)
        (y,) = session.run(["y"], {"x": x})
        assert y.dtype == np.float32 and y.shape == (batch, n)
        np.testing.assert_allclose(y, x * 2 + 1, rtol=0, atol=1e-6)


def main() -> None:
    path = HERE / "1" / "model.onnx"
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(build_model(), str(path))
    verify(path)
    print(f"wrote {path} ({path.stat().st_size} bytes); onnxruntime check passed")


if __name__ == "__main__":
    main()
