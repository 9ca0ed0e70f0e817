"""Images an intake process hands to the model process for a model that pre-processes on its device
(``preprocess { device: GPU }``): decoded pixels, and with ``decode: GPU`` the JPEGs its device
decodes, in one UINT8 tensor per execution.

The intake has no device, so it decodes (turned upright, in the model's colour mode) and the model
process resizes and normalises each batch on its device. The pixels travel raw: the model process
reads them where the hand-off put them (views of the intake's arena block, which lives until the
request is answered) and copies them only into the device's upload buffer; no encoding, no decoding.
The tensor starts with a little-endian int64 header, the image count and each image's
``(height, width, channels)`` (``(length, 0, 0)`` for an encoded JPEG), then each image's bytes in
order. Only the hand-off makes such an input (``InferenceRequest.preprocessed``: a client's tensor
never counts as one).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..errors import InvalidArgument
from ..types import InferenceRequest

#: The datatype of the tensor the images travel in.
DATATYPE = "UINT8"
_INT = np.dtype("<i8")
_FIELDS = 3  # (height, width, channels) of pixels; (length, 0, 0) of an encoded image


def handed(request: InferenceRequest, name: str) -> bool:
    """Whether input ``name`` is images an intake handed over (the hand-off's own input, not a client's)."""
    return name in request.preprocessed and request.input_datatypes.get(name) == DATATYPE


def pack(images: Sequence[np.ndarray | bytes]) -> np.ndarray:
    """``images`` ((H, W, C) uint8 pixels, or encoded bytes) as one UINT8 tensor."""
    head = np.zeros(1 + _FIELDS * len(images), dtype=_INT)
    head[0] = len(images)
    sizes = []
    for index, image in enumerate(images):
        at = 1 + _FIELDS * index
        if isinstance(image, np.ndarray):
            head[at : at + _FIELDS] = image.shape
            sizes.append(image.nbytes)
        else:
            head[at] = len(image)
            sizes.append(len(image))
    packed = np.empty(head.nbytes + sum(sizes), dtype=np.uint8)
    packed[: head.nbytes] = head.view(np.uint8)
    offset = head.nbytes
    for image, size in zip(images, sizes, strict=True):
        part = packed[offset : offset + size]
        if isinstance(image, np.ndarray):
            np.copyto(part.reshape(image.shape), image, casting="no")
        else:
            part[:] = np.frombuffer(image, dtype=np.uint8)
        offset += size
    return packed


def unpack(packed: np.ndarray) -> list[np.ndarray]:
    """The images of a ``pack``ed tensor, as views of it: (H, W, C) pixels, or 1-D encoded bytes."""
    flat = packed.reshape(-1)
    if flat.dtype != np.uint8 or flat.nbytes < _INT.itemsize:
        raise InvalidArgument("handed-over images: not a packed UINT8 tensor")
    count = int(flat[: _INT.itemsize].view(_INT)[0])
    end = _INT.itemsize * (1 + _FIELDS * count)
    if count < 0 or end > flat.nbytes:
        raise InvalidArgument(f"handed-over images: a header of {count} images does not fit {flat.nbytes} bytes")
    shapes = flat[_INT.itemsize : end].view(_INT).reshape(count, _FIELDS)
    images: list[np.ndarray] = []
    offset = end
    for height, width, channels in shapes.tolist():
        shape = (height, width, channels) if channels else (height,)
        size = height * width * channels if channels else height
        if min(shape) < 0 or offset + size > flat.nbytes:
            raise InvalidArgument(f"handed-over images: image {len(images)} {list(shape)} passes the tensor's end")
        images.append(flat[offset : offset + size].reshape(shape))
        offset += size
    if offset != flat.nbytes:
        raise InvalidArgument(f"handed-over images: {flat.nbytes - offset} bytes left over")
    return images
