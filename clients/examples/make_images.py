"""Write the sample images the README and these examples use, from data that ships in PyPI packages.

    python clients/examples/make_images.py [DIR]      # default: the current directory

needs numpy, Pillow, scikit-learn and scikit-image (``pip install '.[examples]'`` in the Ferry checkout
adds the last two to the plain install; the test extra has them too):

- ``digit.png``, ``seven.png``: held-out 8x8 digits from scikit-learn's digits set (the first one of
  the test split, and the first 7), for ``digits``;
- ``scene.png``: the first held-out synthetic scene of ``model_repo/digit_detector/build.py``, for
  ``digit_detector``;
- ``photo.jpg``: scikit-image's ``astronaut`` photo as a JPEG (quality 90), for ``face_detector``;
- ``scan.png``: scikit-image's ``page`` scan turned 90 degrees clockwise, for ``document_orientation``;
- ``line.png``: one line of text drawn with the Aileron font inside Pillow, for ``text_recognizer``.
"""

from __future__ import annotations

import importlib.util
import io
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
from PIL import Image

MODEL_REPO = Path(__file__).resolve().parents[2] / "model_repo"
LINE = "Ferry reads this line"
LINE_COLOURS = ((255, 255, 255), (20, 20, 20))  # background, ink


def _module(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(path.parent.name + "_" + path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _encode(pixels: np.ndarray, format: str, **options: object) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format=format, **options)
    return buffer.getvalue()


def _digit(index: int) -> np.ndarray:
    from sklearn.datasets import load_digits

    return np.round(load_digits().images[index] * 255 / 16).astype(np.uint8)


def text_line(margin: int = 6) -> np.ndarray:
    """``LINE`` drawn by the OCR references' renderer, cut to its ink plus ``margin`` pixels, as the
    OCR model cuts a line for its recogniser."""
    pixels = _module(MODEL_REPO / "ocr" / "reference.py").rendered([LINE], 28, LINE_COLOURS)
    ink = np.argwhere(pixels.min(axis=2) < 128)
    (top, left), (bottom, right) = ink.min(axis=0) - margin, ink.max(axis=0) + margin + 1
    return np.ascontiguousarray(pixels[max(top, 0) : bottom, max(left, 0) : right])


def example_images() -> dict[str, bytes]:
    """The sample images by file name, encoded."""
    from skimage import data
    from sklearn.datasets import load_digits

    split = np.load(MODEL_REPO / "digits" / "test_split.npz")
    targets = load_digits().target
    indices = [int(i) for i in split["test_indices"]]
    seven = next(i for i in indices if targets[i] == 7)
    scene = _module(MODEL_REPO / "digit_detector" / "build.py").held_out_scenes(count=1)[0]
    return {
        "digit.png": _encode(_digit(indices[0]), "PNG"),
        "seven.png": _encode(_digit(seven), "PNG"),
        "scene.png": _encode(scene.image, "PNG"),
        "photo.jpg": _encode(data.astronaut(), "JPEG", quality=90),
        "scan.png": _encode(np.ascontiguousarray(np.rot90(data.page(), k=-1)), "PNG"),
        "line.png": _encode(text_line(), "PNG"),
    }


def main(argv: list[str]) -> None:
    try:
        import skimage  # noqa: F401
        import sklearn  # noqa: F401
    except ModuleNotFoundError as missing:
        sys.exit(f"make_images.py needs {missing.name}: pip install '.[examples]' in the Ferry checkout")
    folder = Path(argv[0]) if argv else Path.cwd()
    folder.mkdir(parents=True, exist_ok=True)
    for name, encoded in example_images().items():
        (folder / name).write_bytes(encoded)
        print(folder / name)


if __name__ == "__main__":
    main(sys.argv[1:])
