"""Build the ``identity_bf16`` model: Identity on a bfloat16 tensor, for BF16 protocol tests.

Input ``in_BF16`` and output ``out_BF16`` (a copy of the input), both
``TYPE_BF16`` with ``dims: [ -1 ]`` and ``max_batch_size: 8``, so the full
shape is ``[batch, n]``. BF16 is kept out of ``identity_all`` because a
single onnxruntime run cannot combine a string input with a bfloat16 output
through the Python API (details in ``model_repo/identity_all/build.py``).

Findings with onnxruntime 1.31 on CPU (re-checked by ``verify`` each time
this script runs):

* The CPU Identity kernel supports ``tensor(bfloat16)``.
* numpy has no bfloat16 dtype, so the raw 16-bit patterns travel in a
  ``uint16`` array (the same bits KServe V2 sends for BF16: the upper half of
  the float32 bit pattern). Wrap it as a typed input with
  ``onnxruntime.OrtValue.ortvalue_from_numpy_with_onnx_type(u16_array,
  onnx.TensorProto.BFLOAT16)``. Passing the plain ``uint16`` array to
  ``InferenceSession.run`` is rejected ("Unexpected input data type. Actual:
  (tensor(uint16)), expected: (tensor(bfloat16))").
* ``InferenceSession.run`` accepts that ``OrtValue`` as a feed, but cannot
  return a bfloat16 output: converting it to numpy fails with "No
  corresponding Numpy type for Tensor Type. bfloat16". ``OrtValue.numpy()``
  on a bfloat16 result fails the same way.
* Two ways that do work for reading the result:

  1. IOBinding with a preallocated output: wrap a ``uint16`` numpy array with
     ``ortvalue_from_numpy_with_onnx_type(..., BFLOAT16)``, bind it with
     ``bind_ortvalue_output`` and call ``run_with_iobinding``; onnxruntime
     writes the result straight into the numpy buffer (the output shape must
     be known in advance; for this Identity it equals the input shape).
  2. ``InferenceSession.run_with_ort_values`` (all feeds as ``OrtValue``),
     then copy ``tensor_size_in_bytes()`` bytes from the result's
     ``data_ptr()`` (e.g. with ``ctypes.string_at``) into a ``uint16`` array
     of the result's ``shape()``. This works without knowing the output
     shape beforehand.

The graph is written directly with ``onnx.helper`` (no training), so
rebuilding is byte-for-byte deterministic.

Run from the repository root::

    python model_repo/identity_bf16/build.py

It writes ``1/model.onnx`` next to this script and checks it with
onnxruntime.
"""

from __future__ import annotations

import ctypes
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper

HERE = Path(__file__).resolve().parent
OPSET = 17
IR_VERSION = 9


def build_model() -> onnx.ModelProto:
    """Return the ONNX model: out_BF16 = Identity(in_BF16)."""
    shape: list[str | int] = ["batch", "n"]
    x = helper.make_tensor_value_info("in_BF16", TensorProto.BFLOAT16, shape)
    y = helper.make_tensor_value_info("out_BF16", TensorProto.BFLOAT16, shape)
    node = helper.make_node("Identity", ["in_BF16"], ["out_BF16"], name="identity_BF16")
    graph = helper.make_graph([node], "identity_bf16", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="ferry-model-repo")
    model.ir_version = IR_VERSION
    onnx.checker.check_model(model, full_check=True)
    return model


def bf16_bits(values: np.ndarray) -> np.ndarray:
    """Return bfloat16 bit patterns (as uint16) for float32 values, by truncation."""
    return (np.ascontiguousarray(values, dtype=np.float32).view(np.uint32) >> 16).astype(np.uint16)


def verify(path: Path) -> None:
    """Run the model with onnxruntime both ways described above and compare the bits."""
    import onnxruntime as ort

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    assert session.get_inputs()[0].type == "tensor(bfloat16)"
    rng = np.random.default_rng(0)
    for batch, n in [(2, 5), (8, 1), (1, 0)]:
        bits = bf16_bits(rng.standard_normal((batch, n)).astype(np.float32))
        if bits.size:
            bits.flat[0] = 0x7FC0  # a NaN pattern must survive unchanged
        feed = ort.OrtValue.ortvalue_from_numpy_with_onnx_type(bits, TensorProto.BFLOAT16)

        # Way 1: IOBinding into a preallocated uint16 buffer.
        result = np.zeros_like(bits)
        target = ort.OrtValue.ortvalue_from_numpy_with_onnx_type(result, TensorProto.BFLOAT16)
        binding = session.io_binding()
        binding.bind_ortvalue_input("in_BF16", feed)
        binding.bind_ortvalue_output("out_BF16", target)
        session.run_with_iobinding(binding)
        np.testing.assert_array_equal(result, bits)

        # Way 2: run_with_ort_values, then copy the raw bytes out.
        (value,) = session.run_with_ort_values(["out_BF16"], {"in_BF16": feed})
        assert value.data_type() == "tensor(bfloat16)"
        size = value.tensor_size_in_bytes()
        raw = ctypes.string_at(value.data_ptr(), size) if size else b""
        copied = np.frombuffer(raw, dtype=np.uint16).reshape(value.shape())
        np.testing.assert_array_equal(copied, bits)


def main() -> None:
    path = HERE / "1" / "model.onnx"
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(build_model(), str(path))
    verify(path)
    print(f"wrote {path} ({path.stat().st_size} bytes); onnxruntime check passed")


if __name__ == "__main__":
    main()
