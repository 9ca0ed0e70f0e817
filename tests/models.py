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
    return _write_tile(
        model_dir,
        ([rows, 1], [1, width], [rows, width]),
        f"max_batch_size: 0\n"
        f'input [{{ name: "x" data_type: TYPE_FP32 dims: [ 1, {width} ] }}]\n'
        f'output [{{ name: "y" data_type: TYPE_FP32 dims: [ {rows}, {width} ] }}]\n',
    )


def write_repeat_model(model_dir: Path, *, width: int, times: int, extra_config: str = "") -> Path:
    """A batching model dir whose answer is each request's row repeated ``times`` times: a small
    request, a big answer, held by the batcher as ``extra_config`` says."""
    return _write_tile(
        model_dir,
        ([1, times], ["n", width], ["n", width * times]),
        f"max_batch_size: 32\n"
        f'input [{{ name: "x" data_type: TYPE_FP32 dims: [ {width} ] }}]\n'
        f'output [{{ name: "y" data_type: TYPE_FP32 dims: [ {width * times} ] }}]\n{extra_config}',
    )


def _write_tile(model_dir: Path, shapes: tuple[list[int], list[int | str], list[int | str]], config: str) -> Path:
    """An ONNX Runtime model dir whose one node tiles "x" into "y": (repeats, x's shape, y's shape)."""
    repeats, x_shape, y_shape = shapes
    graph = helper.make_graph(
        [helper.make_node("Tile", ["x", "repeats"], ["y"])],
        "tile",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, y_shape)],
        [numpy_helper.from_array(np.array(repeats, dtype=np.int64), "repeats")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    (model_dir / "1").mkdir(parents=True, exist_ok=True)
    onnx.save(model, model_dir / "1" / "model.onnx")
    (model_dir / "config.pbtxt").write_text(
        f'name: "{model_dir.name}"\nplatform: "onnxruntime_onnx"\n{config}'
        f"instance_group [{{ kind: KIND_CPU count: 1 }}]\n"
    )
    return model_dir


def write_yolov8_export(path: Path, names: dict[int, str], *, strides: tuple[int, ...] = (8, 16, 32)) -> Path:
    """An ONNX file shaped as Ultralytics exports a YOLOv8 / YOLO11 detector with ``dynamic=True``:
    input ``images`` FP32 ``[batch, 3, height, width]`` (RGB, 0..1), output ``output0`` FP32
    ``[batch, 4 + classes, anchors]`` (centre x, centre y, width, height in input pixels, then one
    score per class; one anchor per cell of strides 8, 16 and 32), and the class names in its
    metadata as Ultralytics writes them (``names``: a Python dict literal).

    It stands in for ``yolo export`` (no weights are downloaded): each cell's box is the cell itself
    and class ``c``'s score is the cell's mean of colour channel ``c`` times ``stride / 32``, so a
    pure red 32x32 square on the 32-pixel grid is one ``names[0]`` box scoring 1.0 (finer cells
    score at most 0.5)."""
    assert len(names) <= 3, "one class per colour channel"
    constants = [
        numpy_helper.from_array(np.array(value, dtype=np.int64), name)
        for name, value in (("zero", [0]), ("one", [1]), ("channels", [1]), ("flat", [0, 4 + len(names), -1]))
    ]
    constants.append(numpy_helper.from_array(np.array([len(names)], dtype=np.int64), "classes"))
    constants.append(numpy_helper.from_array(np.array(0, dtype=np.float32), "nought"))
    nodes, levels = [], []
    for s in strides:
        constants += [
            numpy_helper.from_array(np.array(s, dtype=np.float32), f"stride{s}"),
            numpy_helper.from_array(np.array(s / max(strides), dtype=np.float32), f"weight{s}"),
            numpy_helper.from_array(np.array(0.5, dtype=np.float32), f"half{s}"),
        ]
        nodes += [
            helper.make_node("AveragePool", ["images"], [f"pool{s}"], kernel_shape=[s, s], strides=[s, s]),
            helper.make_node("Slice", [f"pool{s}", "zero", "classes", "channels"], [f"colour{s}"]),
            helper.make_node("Mul", [f"colour{s}", f"weight{s}"], [f"scores{s}"]),
            helper.make_node("Slice", [f"pool{s}", "zero", "one", "channels"], [f"first{s}"]),
            helper.make_node("Mul", [f"first{s}", "nought"], [f"nil{s}"]),  # zeros of the cell grid's shape
            helper.make_node("Add", [f"nil{s}", f"stride{s}"], [f"size{s}"]),  # the stride in every cell
            helper.make_node("CumSum", [f"size{s}", "three"], [f"right{s}"]),  # (column + 1) x stride
            helper.make_node("CumSum", [f"size{s}", "two"], [f"bottom{s}"]),
            helper.make_node("Mul", [f"size{s}", f"half{s}"], [f"halfcell{s}"]),
            helper.make_node("Sub", [f"right{s}", f"halfcell{s}"], [f"cx{s}"]),
            helper.make_node("Sub", [f"bottom{s}", f"halfcell{s}"], [f"cy{s}"]),
            helper.make_node(
                "Concat", [f"cx{s}", f"cy{s}", f"size{s}", f"size{s}", f"scores{s}"], [f"cells{s}"], axis=1
            ),
            helper.make_node("Reshape", [f"cells{s}", "flat"], [f"level{s}"]),
        ]
        levels.append(f"level{s}")
    constants += [
        numpy_helper.from_array(np.array(2, dtype=np.int64), "two"),
        numpy_helper.from_array(np.array(3, dtype=np.int64), "three"),
    ]
    nodes.append(helper.make_node("Concat", levels, ["output0"], axis=2))
    graph = helper.make_graph(
        nodes,
        "yolov8_shaped",
        [helper.make_tensor_value_info("images", TensorProto.FLOAT, ["batch", 3, "height", "width"])],
        [helper.make_tensor_value_info("output0", TensorProto.FLOAT, ["batch", 4 + len(names), "anchors"])],
        constants,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    metadata = {"description": "YOLOv8-shaped test model", "stride": "32", "task": "detect", "names": repr(names)}
    onnx.helper.set_model_props(model, metadata)
    onnx.checker.check_model(model)
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, path)
    return path
