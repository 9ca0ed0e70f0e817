"""JPEGs decoded on the pre-processing device (``preprocess { device: GPU decode: GPU }``).

A request's JPEGs go to one batched ``torchvision.io.decode_jpeg(list, device=...)`` call: nvJPEG
on a GPU (torchvision's CUDA build bundles libnvjpeg), torchvision's libjpeg on torch's CPU device.
The decoded pixels stay on the device for the resize (``DevicePreprocessor``), so only the encoded
bytes (~100 KB for a 640x480 photo instead of 900 KB of pixels) cross the host.

Only what the device decodes as Pillow would is sent there: JPEGs (JFIF, EXIF and MPO files) whose
colour is YCbCr or grey, within ``max_pixels``. PNG, WebP, BMP, CMYK JPEGs, images over the pixel
limit, and every JPEG of a request whose batch the device decoder refuses (corrupt data, an
encoding nvJPEG does not take) are decoded by the CPU decoder (Pillow) for that request only; its
error names the image. EXIF orientation is applied by torchvision, as Pillow's ``exif_transpose``.

The pixels differ from libjpeg-turbo's by the IDCT's and chroma upsampling's rounding (measured
in the README, "Decoding on the device").
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

import torch

from .decode import ImageHeader, device_decodable

#: Pillow's RGB -> L weights (ITU-R 601-2 luma, 16-bit fixed point with rounding: ``Image.convert("L")``).
_LUMA = (19595, 38470, 7471)


def torchvision_problem() -> str:
    """Why torchvision's JPEG decoder cannot be used here ("" when it can). A torchvision built
    for CUDA fails on import against a CPU build of torch, with an error that is not an ImportError."""
    try:
        from torchvision.io import decode_jpeg  # noqa: F401
    except Exception as exc:  # ImportError, or RuntimeError from a build that does not match torch
        return f"{type(exc).__name__}: {exc}"
    return ""


class DeviceJpegDecoder:
    """Batched JPEG decoding on one torch device; counts what it decoded and what it handed back."""

    def __init__(self, device: torch.device, gray: bool) -> None:
        from torchvision.io import ImageReadMode, decode_jpeg

        self._decode_jpeg = decode_jpeg
        self._rgb = ImageReadMode.RGB
        self.device = device
        self.gray = gray
        self._lock = threading.Lock()
        self.decoded = 0  # images decoded on the device
        self.refused = 0  # batches the device refused (decoded on the CPU instead)

    @staticmethod
    def takes(header: ImageHeader | None, max_pixels: int) -> bool:
        """Whether the image whose header this is goes to the device (else the CPU decodes it)."""
        return device_decodable(header, max_pixels)

    def decode(self, images: Sequence[bytes]) -> list[torch.Tensor] | None:
        """(H, W, C) uint8 tensors on the device, upright, RGB (or L for a grey model); None when the
        device decoder refuses the batch (the caller decodes it on the CPU)."""
        encoded = [torch.frombuffer(bytearray(data), dtype=torch.uint8) for data in images]
        try:
            decoded = self._decode_jpeg(encoded, mode=self._rgb, device=self.device, apply_exif_orientation=True)
        except RuntimeError:
            with self._lock:
                self.refused += 1
            return None
        with self._lock:
            self.decoded += len(decoded)
        return [self._to_model_mode(image) for image in decoded]

    def _to_model_mode(self, image: torch.Tensor) -> torch.Tensor:
        """(C, H, W) RGB as (H, W, C) in the model's mode: grey as Pillow's ``convert("L")`` computes it."""
        if not self.gray:
            return image.permute(1, 2, 0)
        red, green, blue = image.to(torch.int32)
        luma = (red * _LUMA[0] + green * _LUMA[1] + blue * _LUMA[2] + 0x8000) >> 16
        return luma.to(torch.uint8).unsqueeze(-1)
