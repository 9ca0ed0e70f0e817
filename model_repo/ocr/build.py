"""Build the three OCR models from the ``rapidocr-onnxruntime==1.4.4`` wheel (Apache-2.0, see
``LICENSE.md``): ``text_detector`` (PP-OCRv4 DBNet), ``text_angle`` (PP-OCR mobile v2.0 text-line
angle classifier, 0 / 180) and ``text_recognizer`` (PP-OCRv4 CTC recogniser), each copied
unchanged to ``model_repo/<model>/1/model.onnx``; the recogniser's dictionary (its ``character``
metadata, one entry per line) goes to ``text_recognizer/characters.txt``.

Together the files weigh 16.2 MB. They are committed, like the other bundled real models, so
`ferry serve model_repo` serves OCR on a fresh checkout; this script is how they were made. It
copies them from an installed ``rapidocr_onnxruntime`` (found without importing it) or, when none
is installed, from the wheel pip downloads (without installing it). The test session runs it only
if a file is missing.

Run from the repository root::

    python model_repo/ocr/build.py
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # model_repo/, for packaged.py
from packaged import file_from_wheel  # noqa: E402

REPOSITORY = Path(__file__).resolve().parents[1]
REQUIREMENT = "rapidocr-onnxruntime==1.4.4"
MODELS = {
    "text_detector": "ch_PP-OCRv4_det_infer.onnx",
    "text_angle": "ch_ppocr_mobile_v2.0_cls_infer.onnx",
    "text_recognizer": "ch_PP-OCRv4_rec_infer.onnx",
}
#: Recogniser classes: blank + 6623 dictionary entries + space.
RECOGNIZER_CLASSES = 6625


def model_file(name: str) -> bytes:
    """One model file, from the installed package when there is one, else from the wheel."""
    spec = importlib.util.find_spec("rapidocr_onnxruntime")
    if spec is not None and spec.submodule_search_locations:
        installed = Path(next(iter(spec.submodule_search_locations))) / "models" / name
        if installed.is_file():
            return installed.read_bytes()
    return file_from_wheel(REQUIREMENT, f"rapidocr_onnxruntime/models/{name}")


def dictionary(model_bytes: bytes) -> list[str]:
    """The recogniser's characters, as its ``character`` metadata lists them."""
    import onnx

    metadata = {entry.key: entry.value for entry in onnx.load_from_string(model_bytes).metadata_props}
    characters = metadata["character"].splitlines()
    if len(characters) + 2 != RECOGNIZER_CLASSES:
        raise SystemExit(f"unexpected dictionary of {len(characters)} entries")
    return characters


def main() -> None:
    for model, name in MODELS.items():
        data = model_file(name)
        target = REPOSITORY / model / "1" / "model.onnx"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        print(f"wrote {target} ({len(data)} bytes)")
        if model == "text_recognizer":
            characters = dictionary(data)
            (REPOSITORY / model / "characters.txt").write_text("\n".join(characters) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
