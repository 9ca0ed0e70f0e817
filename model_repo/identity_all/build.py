"""Build the ``identity_all`` model: one Identity per KServe V2 datatype, for protocol tests.

For each V2 datatype ``T`` the model has an input ``in_T`` and an output
``out_T`` (``out_T`` is a copy of ``in_T``), each with ``dims: [ -1 ]`` in
``config.pbtxt`` and ``max_batch_size: 8``, so the full tensor shape is
``[batch, n]`` (the ``n`` of each pair is independent). The datatypes are
BOOL, UINT8, UINT16, UINT32, UINT64, INT8, INT16, INT32, INT64, FP16, FP32,
FP64 and BYTES (an ONNX string tensor, ``TYPE_STRING`` in the config).

Important for callers: ONNX Runtime requires every graph input on every run,
so an inference request to this model must send all 13 inputs (all with the
same batch size), even if the test only cares about one datatype.

BF16 is deliberately NOT in this model; it lives in the separate
``identity_bf16`` model. onnxruntime's CPU Identity kernel does run bfloat16
(see ``model_repo/identity_bf16/build.py`` for how to feed and read it), but
with onnxruntime 1.31's Python API no single run can take a string input and
return a bfloat16 output:

* ``InferenceSession.run`` accepts string inputs (numpy ``object`` arrays of
  ``str``) and also bfloat16 inputs passed as ``OrtValue``, but it converts
  every output to numpy and fails on bfloat16 ("No corresponding Numpy type
  for Tensor Type. bfloat16");
* ``run_with_ort_values`` and ``IOBinding`` can hand bfloat16 outputs back as
  raw ``OrtValue`` buffers, but they need every input as an ``OrtValue`` or a
  bound buffer, and neither ``OrtValue.ortvalue_from_numpy`` nor
  ``IOBinding.bind_cpu_input`` accepts string arrays ("Creation of OrtValues
  is currently only supported from non-string numpy arrays", "Only binding
  non-string Tensors is currently supported").

A model mixing BYTES and BF16 would therefore be unservable by a Python
onnxruntime backend, which is the opposite of what a protocol test model is
for.

BYTES notes (checked by ``verify``): feed a numpy ``object`` array of Python
``str``; outputs come back as ``object`` arrays of ``str``. Elements that are
Python ``bytes`` get stringified by onnxruntime (``b"ab"`` becomes the text
``"b'ab'"``) and fixed-width ``numpy.bytes_`` (``S``) arrays failed to convert, so
a server must decode BYTES elements (UTF-8) before feeding onnxruntime and
encode outputs again; non-UTF-8 payloads cannot round-trip.

The graph is written directly with ``onnx.helper`` (no training), so
rebuilding is byte-for-byte deterministic. This script writes both
``1/model.onnx`` and ``config.pbtxt`` (generated from the same table, so they
cannot drift apart).

Run from the repository root::

    python model_repo/identity_all/build.py
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper

HERE = Path(__file__).resolve().parent
OPSET = 17
IR_VERSION = 9
MAX_BATCH_SIZE = 8


@dataclass(frozen=True)
class Datatype:
    """One V2 datatype and how it maps onto ONNX, Triton's config and numpy."""

    v2: str  # KServe V2 datatype name, used in the tensor names
    onnx_type: int  # onnx.TensorProto element type
    config_type: str  # Triton ModelConfig DataType enum name
    numpy_dtype: str  # numpy dtype of the values ("object" holds str for BYTES)


DATATYPES: tuple[Datatype, ...] = (
    Datatype("BOOL", TensorProto.BOOL, "TYPE_BOOL", "bool"),
    Datatype("UINT8", TensorProto.UINT8, "TYPE_UINT8", "uint8"),
    Datatype("UINT16", TensorProto.UINT16, "TYPE_UINT16", "uint16"),
    Datatype("UINT32", TensorProto.UINT32, "TYPE_UINT32", "uint32"),
    Datatype("UINT64", TensorProto.UINT64, "TYPE_UINT64", "uint64"),
    Datatype("INT8", TensorProto.INT8, "TYPE_INT8", "int8"),
    Datatype("INT16", TensorProto.INT16, "TYPE_INT16", "int16"),
    Datatype("INT32", TensorProto.INT32, "TYPE_INT32", "int32"),
    Datatype("INT64", TensorProto.INT64, "TYPE_INT64", "int64"),
    Datatype("FP16", TensorProto.FLOAT16, "TYPE_FP16", "float16"),
    Datatype("FP32", TensorProto.FLOAT, "TYPE_FP32", "float32"),
    Datatype("FP64", TensorProto.DOUBLE, "TYPE_FP64", "float64"),
    Datatype("BYTES", TensorProto.STRING, "TYPE_STRING", "object"),
)


def build_model() -> onnx.ModelProto:
    """Return the ONNX model with one Identity node per datatype."""
    inputs = []
    outputs = []
    nodes = []
    for dt in DATATYPES:
        # Each pair gets its own symbolic length; all share the batch dimension.
        shape: list[str | int] = ["batch", f"n_{dt.v2}"]
        inputs.append(helper.make_tensor_value_info(f"in_{dt.v2}", dt.onnx_type, shape))
        outputs.append(helper.make_tensor_value_info(f"out_{dt.v2}", dt.onnx_type, shape))
        nodes.append(helper.make_node("Identity", [f"in_{dt.v2}"], [f"out_{dt.v2}"], name=f"identity_{dt.v2}"))
    graph = helper.make_graph(nodes, "identity_all", inputs, outputs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="ferry-model-repo")
    model.ir_version = IR_VERSION
    onnx.checker.check_model(model, full_check=True)
    return model


def config_text() -> str:
    """Return config.pbtxt for the model, in Triton's protobuf text format."""

    def tensor_block(prefix: str) -> str:
        entries = [
            f'  {{\n    name: "{prefix}_{dt.v2}"\n    data_type: {dt.config_type}\n    dims: [ -1 ]\n  }}'
            for dt in DATATYPES
        ]
        return ",\n".join(entries)

    return (
        "# Identity per V2 datatype for protocol tests: out_<T> is a copy of in_<T>.\n"
        "# Every request must send ALL inputs (onnxruntime requires each graph input).\n"
        "# Generated by model_repo/identity_all/build.py; edit the script, not this file.\n"
        'name: "identity_all"\n'
        'platform: "onnxruntime_onnx"\n'
        f"max_batch_size: {MAX_BATCH_SIZE}\n"
        "input [\n"
        f"{tensor_block('in')}\n"
        "]\n"
        "output [\n"
        f"{tensor_block('out')}\n"
        "]\n"
        "instance_group [\n"
        "  {\n"
        "    kind: KIND_CPU\n"
        "    count: 1\n"
        "  }\n"
        "]\n"
    )


def sample(dt: Datatype, rng: np.random.Generator, batch: int, n: int) -> np.ndarray:
    """Return a deterministic sample array for ``dt`` of shape [batch, n]."""
    shape = (batch, n)
    if dt.v2 == "BOOL":
        return rng.integers(0, 2, size=shape).astype(bool)
    if dt.v2 == "BYTES":
        words = ["", "a", "ferry", "héllo", "emoji 🚢", "tab\tsep"]
        picks = rng.integers(0, len(words), size=shape)
        return np.array([[words[i] for i in row] for row in picks], dtype=object).reshape(shape)
    np_dtype = np.dtype(dt.numpy_dtype)
    if np_dtype.kind == "f":
        return (rng.standard_normal(shape) * 100).astype(np_dtype)
    info = np.iinfo(np_dtype)
    return rng.integers(info.min, info.max, size=shape, dtype=np_dtype, endpoint=True)


def verify(path: Path) -> None:
    """Run every Identity with onnxruntime (several batch sizes and lengths) and compare."""
    import onnxruntime as ort

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    assert [i.name for i in session.get_inputs()] == [f"in_{dt.v2}" for dt in DATATYPES]
    assert [o.name for o in session.get_outputs()] == [f"out_{dt.v2}" for dt in DATATYPES]
    rng = np.random.default_rng(0)
    for batch, base_len in [(2, 3), (MAX_BATCH_SIZE, 1), (1, 0)]:
        feeds: dict[str, np.ndarray] = {}
        for index, dt in enumerate(DATATYPES):
            # Different lengths per input show that the lengths are independent.
            n = base_len + index % 3 if base_len else 0
            feeds[f"in_{dt.v2}"] = sample(dt, rng, batch, n)
        results = session.run([f"out_{dt.v2}" for dt in DATATYPES], feeds)
        for dt, got in zip(DATATYPES, results, strict=True):
            want = feeds[f"in_{dt.v2}"]
            assert got.shape == want.shape, (dt.v2, got.shape, want.shape)
            assert got.dtype == want.dtype, (dt.v2, got.dtype, want.dtype)
            if got.dtype.kind == "f":
                # Compare raw bits so that NaN and -0.0 would have to match too.
                bits = f"u{got.itemsize}"
                np.testing.assert_array_equal(got.view(bits), want.view(bits), err_msg=dt.v2)
            else:
                np.testing.assert_array_equal(got, want, err_msg=dt.v2)


def main() -> None:
    path = HERE / "1" / "model.onnx"
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(build_model(), str(path))
    (HERE / "config.pbtxt").write_text(config_text(), encoding="utf-8")
    verify(path)
    print(f"wrote {path} ({path.stat().st_size} bytes) and config.pbtxt; onnxruntime check passed")


if __name__ == "__main__":
    main()
