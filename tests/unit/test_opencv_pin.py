"""The installed OpenCV is the one whose pixels the tests prove (see ``tests/opencv_pixels.py``): an
OpenCV outside the pin fails here with the pin named, before the pixel tests fail with bare numbers."""

from __future__ import annotations

import cv2
from packaging.version import Version

from ..opencv_pixels import PIN, PROVEN_OPENCV, describe_installed, installed_opencv, pinned_opencv


def test_pyproject_pins_the_proven_opencv_range() -> None:
    pin = pinned_opencv()
    assert pin.specifier == PROVEN_OPENCV.specifier, (
        f"pyproject.toml pins {pin}, but the pixel tests and model_repo/ocr/reference.json are proven under "
        f"{PIN}: regenerate the references under the new range first (tests/opencv_pixels.py says how)"
    )


def test_installed_opencv_is_in_the_pinned_range() -> None:
    owners = installed_opencv()
    assert owners, f"the imported cv2 belongs to no installed package: {describe_installed()}"
    for name, version in owners:
        assert PROVEN_OPENCV.specifier.contains(version), (
            f"{name} {version} is installed, outside the pin {PIN} in pyproject.toml: MediaPipe's face "
            f"pixels and the OCR references are proven only there; run `pip install '{PIN}'` "
            f"({describe_installed()})"
        )
        # The binary itself: opencv-python and -headless installed together overwrite each other's cv2.
        assert Version(cv2.__version__).release == Version(version).release[:3], (
            f"{name} says {version} but the imported cv2 is {cv2.__version__}: two OpenCV packages share "
            f"one cv2 ({describe_installed()})"
        )
