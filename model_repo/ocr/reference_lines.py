"""Reference answers for the ``LINE_GROUPS`` reading order: rapidocr 3.10's own pipeline.

rapidocr 2 and later sort text boxes inside their ``TextDetector`` (by y, neighbours less than
10 px apart in y grouped into one line, left to right within it) instead of 1.4.4's bubble-swap
sort in ``RapidOCR``. ``main`` runs rapidocr 3.10 with the bundled models (``text_detector``,
``text_angle``, ``text_recognizer`` and its ``characters.txt``, given by path, so the package
downloads nothing and its answers differ from 1.4.4's only by its own steps) on the photos of
``reference.py`` and on ``tilted()`` (two rendered receipt lines turned 2 to 4 degrees, where
the two sorts disagree: 1.4.4 puts a rising line's first word last), and writes
``reference_lines.json``: per photo its ``TextDetector``'s boxes in its order (the decoded BGR
image's pixels), and ``RapidOCR()``'s lines (box, text, score) in its order.

rapidocr needs its own environment, with the OpenCV Ferry pins::

    python3.11 -m venv /tmp/refnew
    /tmp/refnew/bin/pip install rapidocr==3.10.0 onnxruntime scikit-image opencv-python-headless==4.10.0.84
    /tmp/refnew/bin/python model_repo/ocr/reference_lines.py
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
REPOSITORY = HERE.parent
sys.path.insert(0, str(HERE))
from packaged import png  # noqa: E402  (reference.py put model_repo/ on the path)
from reference import photos  # noqa: E402


def tilted() -> dict[str, bytes]:
    """Two receipt lines (Pillow's bundled Aileron font, wide gaps between words) turned by a few
    degrees, as a photographed page is: each line's words drift in y from left to right."""
    from PIL import Image, ImageDraw, ImageFont

    lines, size, paper = ["TOTAL    12.50    EUR    PAID", "CARD    4412    DATE    2024"], 26, (250, 250, 245)
    font = ImageFont.load_default(size=size)
    width = max(int(font.getlength(line)) for line in lines) + 2 * size
    image = Image.new("RGB", (width, int(len(lines) * size * 1.8) + size), paper)
    draw = ImageDraw.Draw(image)
    for row, line in enumerate(lines):
        draw.text((size, size // 2 + int(row * size * 1.8)), line, font=font, fill=(10, 10, 10))
    return {
        f"receipt_turned_{name}": png(np.asarray(image.rotate(angle, Image.BICUBIC, expand=True, fillcolor=paper)))
        for name, angle in (("2", 2), ("4", 4), ("minus_3", -3))
    }


def main() -> None:
    from rapidocr import RapidOCR

    engine = RapidOCR(
        params={
            "Det.model_path": str(REPOSITORY / "text_detector" / "1" / "model.onnx"),
            "Cls.model_path": str(REPOSITORY / "text_angle" / "1" / "model.onnx"),
            "Rec.model_path": str(REPOSITORY / "text_recognizer" / "1" / "model.onnx"),
            "Rec.rec_keys_path": str(REPOSITORY / "text_recognizer" / "characters.txt"),
            "Global.log_level": "warning",
        }
    )
    results = {}
    for name, encoded in {**photos(), **tilted()}.items():
        bgr = engine.load_img(encoded)
        detected = engine._load_det_model()(bgr)
        found = engine(encoded)
        boxes = [] if found.boxes is None else found.boxes
        results[name] = {
            "size": [int(bgr.shape[1]), int(bgr.shape[0])],
            "detector": [
                np.asarray(box, dtype=float).tolist() for box in (detected.boxes if detected.boxes is not None else [])
            ],
            "ocr": [
                {"box": np.asarray(box, dtype=float).tolist(), "text": text, "score": float(score)}
                for box, text, score in zip(boxes, found.txts or (), found.scores or (), strict=True)
            ],
        }
    (HERE / "reference_lines.json").write_text(json.dumps(results, indent=1, ensure_ascii=False) + "\n")
    for name, result in results.items():
        print(name, result["size"], len(result["detector"]), [line["text"] for line in result["ocr"]])


if __name__ == "__main__":
    main()
