"""Build ``face_detector``: MediaPipe's BlazeFace short-range face detector as ONNX.

The model ships inside the ``mediapipe==0.10.14`` wheel as
``mediapipe/modules/face_detection/face_detection_short_range.tflite`` (Apache-2.0,
see ``LICENSE.md``); newer mediapipe wheels no longer carry it. This script fetches
that wheel with pip (no hub download), reads the file out of it, converts it with the
pure-Python ``tflite2onnx`` (which turns the NHWC input into NCHW) and checks that the
converted graph has the contract ``config.pbtxt`` declares:

* input ``input``: FP32 ``[1, 3, 128, 128]``, RGB in [-1, 1];
* ``regressors``: FP32 ``[1, 896, 16]``: per SSD anchor a box (x, y, w, h offsets in
  input pixels) then 6 keypoints (x, y);
* ``classificators``: FP32 ``[1, 896, 1]``: face logits.

Rebuilds are not byte-identical (the converter's serialisation varies); a rebuild checked
against the committed file gave bit-identical outputs. Run from the repository root (needs
``tflite2onnx``, ``onnx``, ``onnxruntime``; pip downloads the mediapipe wheel, not installed)::

    python model_repo/face_detector/build.py
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # model_repo/, for packaged.py
from packaged import file_from_wheel  # noqa: E402

HERE = Path(__file__).resolve().parent
MEMBER = "mediapipe/modules/face_detection/face_detection_short_range.tflite"
#: The cp311 manylinux wheel: the only mediapipe release on PyPI that still carries the model.
WHEEL_OPTIONS = ("--only-binary", ":all:", "--python-version", "3.11", "--platform", "manylinux_2_17_x86_64")
EXPECTED = {"input": [1, 3, 128, 128], "regressors": [1, 896, 16], "classificators": [1, 896, 1]}


def convert(tflite: Path, onnx_path: Path) -> None:
    import onnx
    import tflite2onnx

    onnx_path.parent.mkdir(parents=True, exist_ok=True)
    tflite2onnx.convert(str(tflite), str(onnx_path))
    graph = onnx.load(str(onnx_path)).graph
    shapes = {t.name: [d.dim_value for d in t.type.tensor_type.shape.dim] for t in [*graph.input, *graph.output]}
    if shapes != EXPECTED:
        raise SystemExit(f"unexpected graph interface {shapes}, expected {EXPECTED}")


def main() -> None:
    with tempfile.TemporaryDirectory() as workdir:
        tflite = Path(workdir) / "face_detection_short_range.tflite"
        tflite.write_bytes(file_from_wheel("mediapipe==0.10.14", MEMBER, *WHEEL_OPTIONS))
        convert(tflite, HERE / "1" / "model.onnx")
    print(f"wrote {HERE / '1' / 'model.onnx'}")


if __name__ == "__main__":
    main()
