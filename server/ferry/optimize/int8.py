"""INT8 ONNX by static quantization into QDQ form, with onnxruntime.quantization.

QDQ (QuantizeLinear/DequantizeLinear pairs around each quantized operator) keeps the graph a
plain ONNX graph that ONNX Runtime fuses into integer kernels on CPU and that TensorRT reads as
explicit INT8. Weights are quantized per output channel; activation ranges come from calibration.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import onnx
from onnxruntime.quantization import CalibrationDataReader, CalibrationMethod, QuantFormat, quantize_static
from onnxruntime.quantization.shape_inference import quant_pre_process

from .cpu import Int8Scheme

CALIBRATION_METHODS = {
    "minmax": CalibrationMethod.MinMax,
    "entropy": CalibrationMethod.Entropy,
    "percentile": CalibrationMethod.Percentile,
}


def quantize_int8(
    source: Path,
    destination: Path,
    reader: CalibrationDataReader,
    scheme: Int8Scheme,
    method: str = "minmax",
    per_channel: bool = True,
) -> None:
    """Write the QDQ INT8 version of ``source`` to ``destination``.

    The model first goes through onnxruntime's pre-processing (shape inference and graph
    optimisation), which its quantization guide recommends so that Conv+BN+ReLU are folded and
    quantized as one unit.
    """
    if method not in CALIBRATION_METHODS:
        raise ValueError(f"unknown calibration method '{method}' ({', '.join(CALIBRATION_METHODS)})")
    with tempfile.TemporaryDirectory(prefix="ferry-int8-") as tmp:
        prepared = Path(tmp) / "prepared.onnx"
        quant_pre_process(str(source), str(prepared), skip_symbolic_shape=True)
        quantize_static(
            str(prepared),
            str(destination),
            reader,
            quant_format=QuantFormat.QDQ,
            per_channel=per_channel,
            reduce_range=scheme.reduce_range,
            activation_type=scheme.activation_type,
            weight_type=scheme.weight_type,
            calibrate_method=CALIBRATION_METHODS[method],
            extra_options={
                "ActivationSymmetric": scheme.symmetric_activations,
                "WeightSymmetric": True,
            },
        )


def count_qdq_nodes(path: Path) -> dict[str, int]:
    """How many QuantizeLinear / DequantizeLinear nodes a model has (zero for an unquantized one)."""
    counts = {"QuantizeLinear": 0, "DequantizeLinear": 0}
    for node in onnx.load(str(path), load_external_data=False).graph.node:
        if node.op_type in counts:
            counts[node.op_type] += 1
    return counts
