"""Build the ``fixed_nobatch`` example model: a fixed-shape model without a batch dimension.

Used to exercise ``max_batch_size: 0`` handling: the input ``x`` is exactly
FP32 ``[2, 3]`` (no batch dimension at all, and the shape is fixed). Outputs:

* ``y`` = ``x * x`` (element-wise square), FP32 ``[2, 3]``;
* ``total`` = sum of all elements of ``x``, FP32 ``[1]``.

The graph is written directly with ``onnx.helper`` (no training), so
rebuilding is byte-for-byte deterministic.

Run from the repository root::

    python model_repo/fixed_nobatch/build.py

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
    """Return the ONNX model: y = x * x and total = sum(x) reshaped to [1]."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])
    total = helper.make_tensor_value_info("total", TensorProto.FLOAT, [1])
    shape_1 = numpy_helper.from_array(np.array([1], dtype=np.int64), name="shape_1")
    nodes = [
        helper.make_node("Mul", ["x", "x"], ["y"], name="square"),
        # No axes input: reduce over every axis; keepdims=0 gives a scalar.
        helper.make_node("ReduceSum", ["x"], ["total_scalar"], name="sum_all", keepdims=0),
        helper.make_node("Reshape", ["total_scalar", "shape_1"], ["total"], name="to_1d"),
    ]
    graph = helper.make_graph(nodes, "fixed_nobatch", [x], [y, total], initializer=[shape_1])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="ferry-model-repo")
    model.ir_version = IR_VERSION
    onnx.checker.check_model(model, full_check=True)
    return model


def verify(path: Path) -> None:
    """Run the saved model with onnxruntime and compare with numpy."""
    import onnxruntime as ort

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    x = np.arange(6, dtype=np.float32).reshape(2, 3) - 2.5
    y, total = session.run(["y", "total"], {"x": x})
    assert y.dtype == np.float32 and y.shape == (2, 3)
    assert total.dtype == np.float32 and total.shape == (1,)
    np.testing.assert_array_equal(y, x * x)
    np.testing.assert_allclose(total, [x.sum()], rtol=0, atol=1e-6)


def main() -> None:
    path = HERE / "1" / "model.onnx"
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(build_model(), str(path))
    verify(path)
    print(f"wrote {path} ({path.stat().st_size} bytes); onnxruntime check passed")


if __name__ == "__main__":
    main()
