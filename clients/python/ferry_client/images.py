"""Images in, typed answers out: the shared part of the ``classify()`` / ``detect()`` / ``embed()`` /
``recognize()`` helpers.

Callers pass what they have (a path, encoded bytes, or a PIL image); the server decodes and
pre-processes with the model's own pipeline, so the client never needs Pillow itself.
"""

from __future__ import annotations

import io
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .errors import InvalidArgumentError, ServerError

ImageLike = str | os.PathLike | bytes | bytearray | memoryview | Any  # Any: a PIL.Image.Image


@dataclass(frozen=True)
class Classification:
    """One of an image's top-k classes."""

    index: int
    score: float
    label: str | None = None


@dataclass(frozen=True)
class Detection:
    """One detected object; ``box`` is (x1, y1, x2, y2) and ``keypoints`` (x, y) pairs (models that
    predict them, such as face detectors), both in the original image's pixels; ``polygon`` the
    four corners of a text detector's quadrilateral (clockwise from the top-left). From an ensemble:
    ``classes`` a second model gave the detection's crop (a cascade), and ``extras`` the ensemble's
    other outputs for this detection, by output name."""

    box: tuple[float, float, float, float]
    score: float
    class_id: int
    label: str | None = None
    keypoints: list[tuple[float, float]] | None = None
    polygon: list[tuple[float, float]] | None = None
    classes: list[Classification] | None = None
    extras: dict[str, Any] | None = None


@dataclass(frozen=True)
class TextLine:
    """What a text recogniser read in one line image, and its confidence."""

    text: str
    score: float


def image_bytes(image: ImageLike) -> bytes:
    """Encoded bytes of one image; PIL images are sent as PNG (lossless)."""
    if isinstance(image, (bytes, bytearray, memoryview)):
        data = bytes(image)
    elif isinstance(image, (str, os.PathLike)):
        try:
            with open(image, "rb") as handle:
                data = handle.read()
        except OSError as exc:
            raise InvalidArgumentError(f"cannot read image {os.fspath(image)!r}: {exc.strerror or exc}") from None
    elif hasattr(image, "save") and hasattr(image, "mode"):
        buffer = io.BytesIO()
        image.save(buffer, format="PNG")
        data = buffer.getvalue()
    else:
        raise InvalidArgumentError(f"an image must be a path, bytes or a PIL image, not {type(image).__name__}")
    if not data:
        raise InvalidArgumentError("empty image")
    return data


def many(images: ImageLike | Sequence[ImageLike]) -> tuple[list[bytes], bool]:
    """All images as bytes, and whether the caller passed a single image (not a list)."""
    if isinstance(images, (list, tuple)):
        if not images:
            raise InvalidArgumentError("no images given")
        return [image_bytes(image) for image in images], False
    return [image_bytes(images)], True


def _results(document: Any, key: str) -> list[list[dict[str, Any]]]:
    try:
        return [entry[key] for entry in document["results"]]
    except (KeyError, TypeError) as exc:
        raise ServerError(f"malformed {key} response: missing {exc}") from None


def parse_classifications(document: Any) -> list[list[Classification]]:
    """The /classify response as one list of classes per image."""
    return [_classifications(image) for image in _results(document, "classes")]


def _classifications(entries: Any) -> list[Classification]:
    return [Classification(int(c["index"]), float(c["score"]), c.get("label")) for c in entries]


def _box(values: Any) -> tuple[float, float, float, float]:
    x1, y1, x2, y2 = (float(v) for v in values)
    return x1, y1, x2, y2


def parse_detections(document: Any) -> list[list[Detection]]:
    """The /detect response as one list of detections per image."""
    return [
        [
            Detection(
                _box(d["box"]),
                float(d["score"]),
                int(d["class_id"]),
                d.get("label"),
                [(float(x), float(y)) for x, y in d["keypoints"]] if "keypoints" in d else None,
                [(float(x), float(y)) for x, y in d["polygon"]] if "polygon" in d else None,
                _classifications(d["classes"]) if "classes" in d else None,
                d.get("extras"),
            )
            for d in image
        ]
        for image in _results(document, "detections")
    ]


def parse_embeddings(document: Any) -> list[np.ndarray]:
    """The /embed response as one float32 vector per image."""
    try:
        return [np.asarray(entry["embedding"], dtype=np.float32) for entry in document["results"]]
    except (KeyError, TypeError, ValueError) as exc:
        raise ServerError(f"malformed embedding response: {exc}") from None


def parse_text_lines(document: Any) -> list[TextLine]:
    """The /recognize response as one line per image."""
    try:
        return [TextLine(str(entry["text"]), float(entry["score"])) for entry in document["results"]]
    except (KeyError, TypeError, ValueError) as exc:
        raise ServerError(f"malformed recognition response: missing {exc}") from None


def image_call_parts(images: list[bytes]) -> tuple[bytes | None, list[tuple[str, tuple[str, bytes, str]]] | None]:
    """One image goes as the raw body; several as multipart ``images`` fields."""
    if len(images) == 1:
        return images[0], None
    return None, [("images", (f"image{i}", data, "application/octet-stream")) for i, data in enumerate(images)]


def query(options: dict[str, Any]) -> str:
    """Query string of the options that are set."""
    from urllib.parse import urlencode

    present = {key: value for key, value in options.items() if value is not None}
    return "?" + urlencode(present) if present else ""
