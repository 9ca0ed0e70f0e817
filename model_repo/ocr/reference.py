"""Reference answers for the OCR models: rapidocr_onnxruntime 1.4.4's own pipeline.

``photos`` builds the test images from scans that ship in scikit-image (``text.png``,
``page.png``, crops, rotations and non-integer rescales of them) and two lines rendered with the
Aileron font that ships inside Pillow; ``main`` runs, on each:

* ``RapidOCR()`` with its defaults (the whole pipeline): boxes (4 corners, original pixels), text
  and confidence per line, in its reading order;
* its ``TextDetector`` alone on the decoded BGR image: boxes in that image's pixels;
* its ``TextClassifier`` on the crops ``RapidOCR`` cut (label, score) and its ``TextRecognizer``
  on each crop alone (text, confidence), so each model can be checked by itself. Each crop is
  described by its shape and the SHA-256 of its pixels, so a test can prove it cut the same crop.

rapidocr-onnxruntime depends on ``opencv-python``, which clashes with Ferry's
``opencv-python-headless``, so run it in a separate environment (``photos`` needs only
scikit-image, numpy and Pillow, so the tests import it), with the OpenCV version Ferry pins: the
crops are ``cv2.warpPerspective``, whose pixels differ between OpenCV releases (4.10 and 5.0)::

    python3.11 -m venv .refvenv
    .refvenv/bin/pip install rapidocr-onnxruntime==1.4.4 scikit-image opencv-python==4.10.0.84
    .refvenv/bin/python model_repo/ocr/reference.py
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # model_repo/, for packaged.py
from packaged import png  # noqa: E402

HERE = Path(__file__).resolve().parent


def rendered(lines: list[str], size: int, colours: tuple[tuple[int, int, int], tuple[int, int, int]]) -> np.ndarray:
    """RGB pixels of ``lines`` drawn with Pillow's bundled Aileron font (dark on light or so)."""
    from PIL import Image, ImageDraw, ImageFont

    font = ImageFont.load_default(size=size)
    background, ink = colours
    width = max(int(font.getlength(line)) for line in lines) + 2 * size
    image = Image.new("RGB", (width, int(len(lines) * size * 1.6) + size), background)
    draw = ImageDraw.Draw(image)
    for row, line in enumerate(lines):
        draw.text((size, size // 2 + int(row * size * 1.6)), line, font=font, fill=ink)
    return np.asarray(image)


def _rescaled(pixels: np.ndarray, factor: float) -> np.ndarray:
    from PIL import Image

    image = Image.fromarray(pixels)
    return np.asarray(image.resize((round(image.width * factor), round(image.height * factor)), Image.BICUBIC))


def photos() -> dict[str, bytes]:
    """Encoded test images by name (PNG, so every decoder sees the same pixels)."""
    from skimage import data

    text, page = data.text(), data.page()
    return {
        "text": png(text),
        "page": png(page),
        "text_upside_down": png(np.rot90(text, k=2)),
        "page_upside_down": png(np.rot90(page, k=2)),
        "page_turned_90": png(np.rot90(page, k=-1)),
        "page_top_half": png(page[:96]),
        "page_left_crop": png(page[20:170, :250]),
        "text_crop": png(text[30:150, 40:420]),
        "page_rescaled_1_7": png(_rescaled(page, 1.7)),
        "text_rescaled_0_8": png(_rescaled(text, 0.8)),
        "page_wide_strip": png(page[60:100]),
        "page_colour_tinted": png(np.stack([page, (page * 0.8).astype(np.uint8), np.full_like(page, 200)], axis=-1)),
        "rendered_lines": png(
            rendered(["Ferry serves OCR models", "Invoice 2024-117: 42.50 EUR"], 28, ((255, 255, 255), (20, 20, 20)))
        ),
        "rendered_light_on_dark": png(
            rendered(["Reading order matters", "Line two, then line 3"], 22, ((30, 40, 90), (240, 240, 200)))
        ),
        "rendered_upside_down": png(
            np.rot90(rendered(["Turned upside down text"], 30, ((250, 250, 240), (0, 0, 0))), k=2)
        ),
    }


def crop_digest(crop: np.ndarray) -> dict:
    """What identifies a crop: its shape and the SHA-256 of its (C-contiguous) pixels."""
    return {"shape": list(crop.shape), "sha256": hashlib.sha256(np.ascontiguousarray(crop).tobytes()).hexdigest()}


def main() -> None:
    from rapidocr_onnxruntime import RapidOCR

    engine = RapidOCR()
    results = {}
    for name, encoded in photos().items():
        found, _ = engine(encoded)
        bgr = engine.load_img(encoded)
        detected, _ = engine.text_det(bgr)
        # The crops RapidOCR cuts (same steps as its __call__, before angle classification).
        image, _, _ = engine.preprocess(bgr)
        image, _ = engine.maybe_add_letterbox(image, {})
        boxes, _ = engine.auto_text_det(image)
        crops = [] if boxes is None else engine.get_crop_img_list(image, boxes)
        _, angles, _ = engine.text_cls(crops) if crops else ([], [], 0.0)
        singles = [engine.text_rec([crop])[0][0] for crop in crops]
        results[name] = {
            "size": [int(bgr.shape[1]), int(bgr.shape[0])],
            "ocr": [
                {"box": np.asarray(box, dtype=float).tolist(), "text": text, "score": float(score)}
                for box, text, score in (found or [])
            ],
            "detector": [np.asarray(box, dtype=float).tolist() for box in (detected if detected is not None else [])],
            "crops": [
                {
                    **crop_digest(crop),
                    "angle": {"label": str(label), "score": float(score)},
                    "recognised": {"text": text, "score": float(score_text)},
                }
                for crop, (label, score), (text, score_text) in zip(crops, angles, singles, strict=True)
            ],
        }
    (HERE / "reference.json").write_text(json.dumps(results, indent=1, ensure_ascii=False) + "\n")
    for name, result in results.items():
        print(name, result["size"], len(result["detector"]), [line["text"] for line in result["ocr"]])


if __name__ == "__main__":
    main()
