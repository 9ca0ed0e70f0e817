"""INT8 ONNX by static quantization into QDQ form, with onnxruntime.quantization.

QDQ (QuantizeLinear/DequantizeLinear pairs around each quantized operator) keeps the graph a
plain ONNX graph that ONNX Runtime fuses into integer kernels on CPU and that TensorRT reads as
explicit INT8. Weights are quantized per output channel; activation ranges come from calibration.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import onnx
from onnx import version_converter
from onnxruntime.quantization import CalibrationDataReader, CalibrationMethod, QuantFormat, quantize_static
from onnxruntime.quantization.shape_inference import quant_pre_process

from .cpu import Int8Scheme

CALIBRATION_METHODS = {
    "minmax": CalibrationMethod.MinMax,
    "entropy": CalibrationMethod.Entropy,
    "percentile": CalibrationMethod.Percentile,
}


#: Operators whose output is one learned quantity (a feature map, logits, box offsets): walking back
#: from a graph output, the first of these on each path is the output head's last layer.
WEIGHTED_OPS = frozenset({"Conv", "ConvTranspose", "Gemm", "MatMul"})


def float_output_nodes(model: onnx.ModelProto) -> list[str]:
    """The nodes between each graph output and the last weighted layer before it, that layer included.

    These are what ``ferry optimize`` keeps in float by default: the output head, and the decode
    arithmetic and Concat nodes after it, which often put quantities of different ranges in one
    tensor (a YOLO output holds boxes in pixels, 0..640, beside sigmoid scores, 0..1): one INT8 scale
    for both rounds every score to a multiple of ~2.5 (ONNX Runtime's guidance for detectors is the
    same: leave the head in float).
    """
    producer = {output: node for node in model.graph.node for output in node.output}
    keep: list[str] = []
    seen: set[str] = set()
    pending = [output.name for output in model.graph.output]
    while pending:
        node = producer.get(pending.pop())
        if node is None or node.name in seen:
            continue
        seen.add(node.name)
        keep.append(node.name)
        if node.op_type not in WEIGHTED_OPS:
            pending.extend(name for name in node.input if name)
    return keep


#: Per-channel QDQ needs DequantizeLinear's ``axis``, which ONNX added in opset 13.
PER_CHANNEL_OPSET = 13


def _prepare_graph(path: Path) -> onnx.ModelProto:
    """Give unnamed nodes a name (quantize_static excludes nodes by name), raise an older default-domain
    opset to 13 (per-channel weights need it; MediaPipe's BlazeFace export is opset 11), save it back."""
    model = onnx.load(str(path))
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), PER_CHANNEL_OPSET)
    if opset < PER_CHANNEL_OPSET:
        model = version_converter.convert_version(model, PER_CHANNEL_OPSET)
    names = {node.name for node in model.graph.node}
    for index, node in enumerate(model.graph.node):
        if not node.name:
            node.name = f"ferry_node_{index}"
            while node.name in names:
                node.name += "_"
            names.add(node.name)
    onnx.save(model, str(path))
    return model


def quantize_int8(
    source: Path,
    destination: Path,
    reader: CalibrationDataReader,
    scheme: Int8Scheme,
    method: str = "minmax",
    per_channel: bool = True,
    quantize_outputs: bool = False,
) -> list[str]:
    """Write the QDQ INT8 version of ``source`` to ``destination``; return the nodes kept in float.

    The model first goes through onnxruntime's pre-processing (shape inference and graph
    optimisation), which its quantization guide recommends so that Conv+BN+ReLU are folded and
    quantized as one unit. Unless ``quantize_outputs``, the output heads stay in float
    (``float_output_nodes``).
    """
    if method not in CALIBRATION_METHODS:
        raise ValueError(f"unknown calibration method '{method}' ({', '.join(CALIBRATION_METHODS)})")
    with tempfile.TemporaryDirectory(prefix="ferry-int8-") as tmp:
        prepared = Path(tmp) / "prepared.onnx"
        quant_pre_process(str(source), str(prepared), skip_symbolic_shape=True)
        model = _prepare_graph(prepared)
        kept = [] if quantize_outputs else float_output_nodes(model)
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
            nodes_to_exclude=kept,
            extra_options={
                "ActivationSymmetric": scheme.symmetric_activations,
                "WeightSymmetric": True,
            },
        )
    return kept
