"""``ferry optimize``: FP16 and INT8 ONNX models and TensorRT engines from an FP32 ONNX model.

Modules, one job each: ``cpu`` (which INT8 scheme suits this CPU), ``calibration`` (images through
the model's own pipeline), ``int8`` and ``fp16`` (the conversions, by onnxruntime's tools),
``tensorrt_build`` (engines), ``accuracy`` and ``detection_map`` (the comparison with FP32),
``writer`` (the model directory and its config) and ``run`` (the whole command). Importing this
package imports none of them, so the server never loads the quantization tools.
"""
