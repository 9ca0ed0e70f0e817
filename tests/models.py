"""ONNX models the reliability tests build on the fly: slow enough to queue, big enough to weigh."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def write_mlp_model(
    model_dir: Path,
    *,
    width: int = 512,
    layers: int = 8,
    offset: float = 0.0,
    version: int = 1,
    max_batch_size: int = 8,
    extra_config: str = "",
    dense: bool = False,
) -> Path:
    """A model dir whose ``y = x @ W1 @ ... @ Wn + offset`` costs ``layers`` matmuls per item.

    The weights are scaled identities (exactly 1.0 overall), so ``y == x + offset``: tests can tell
    which version answered from the output alone, and the model's cost and size still grow with
    ``width`` and ``layers``. ``dense``: random weights instead (no zeros the system could leave
    unmapped, so the model's memory is all resident; ``y`` is then not ``x``).
    """
    weights, nodes = [], []
    current = "x"
    for index in range(layers):
        name = f"w{index}"
        matrix = (
            np.random.default_rng(index).standard_normal((width, width), np.float32) / width
            if dense
            else np.eye(width, dtype=np.float32)
        )
        weights.append(numpy_helper.from_array(matrix, name))
        nodes.append(helper.make_node("MatMul", [current, name], [f"h{index}"]))
        current = f"h{index}"
    weights.append(numpy_helper.from_array(np.array(offset, dtype=np.float32), "offset"))
    nodes.append(helper.make_node("Add", [current, "offset"], ["y"]))
    graph = helper.make_graph(
        nodes,
        "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", width])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", width])],
        weights,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    (model_dir / str(version)).mkdir(parents=True, exist_ok=True)
    onnx.save(model, model_dir / str(version) / "model.onnx")
    (model_dir / "config.pbtxt").write_text(
        f'name: "{model_dir.name}"\nplatform: "onnxruntime_onnx"\nmax_batch_size: {max_batch_size}\n'
        f'input [{{ name: "x" data_type: TYPE_FP32 dims: [ {width} ] }}]\n'
        f'output [{{ name: "y" data_type: TYPE_FP32 dims: [ {width} ] }}]\n'
        f"instance_group [{{ kind: KIND_CPU count: 1 }}]\n{extra_config}"
    )
    return model_dir


def write_tile_model(model_dir: Path, *, rows: int, width: int) -> Path:
    """A model dir whose answer is ``rows`` copies of its one-row input: a small request, a big answer."""
    repeats = numpy_helper.from_array(np.array([rows, 1], dtype=np.int64), "repeats")
    graph = helper.make_graph(
        [helper.make_node("Tile", ["x", "repeats"], ["y"])],
        "tile",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, width])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [rows, width])],
        [repeats],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    (model_dir / "1").mkdir(parents=True, exist_ok=True)
    onnx.save(model, model_dir / "1" / "model.onnx")
    (model_dir / "config.pbtxt").write_text(
        f'name: "{model_dir.name}"\nplatform: "onnxruntime_onnx"\nmax_batch_size: 0\n'
        f'input [{{ name: "x" data_type: TYPE_FP32 dims: [ 1, {width} ] }}]\n'
        f'output [{{ name: "y" data_type: TYPE_FP32 dims: [ {rows}, {width} ] }}]\n'
        f"instance_group [{{ kind: KIND_CPU count: 1 }}]\n"
    )
    return model_dir
