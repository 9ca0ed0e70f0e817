"""Pre-processing a whole batch with torch on a device (``preprocess { device: GPU }``).

Images are decoded on the CPU (Pillow); their pixels are then uploaded as uint8, resized on the
device one by one (they differ in size), placed into one batch tensor with the same geometry as
the CPU path (``preprocess.place``), and colour order, scaling, mean/std, layout and type are
applied to the whole batch at once. The result comes back to host memory in one copy, because the
scheduler batches numpy arrays.

Resizing uses ``torch.nn.functional.interpolate`` with antialiasing for BILINEAR and BICUBIC (close
to Pillow's filters when shrinking) and ``nearest-exact`` for NEAREST, then rounds to whole pixel
values as Pillow's 8-bit resize does. Results agree with the CPU path to within a pixel level or
two where resampling happens, and exactly elsewhere. Works on any torch device, CPU included.
It reproduces ``resize_engine: PILLOW`` only: the OpenCV engine, LANCZOS, AREA, ``pad_then_resize``
and ``resize_alignment: CORNERS`` are refused at load with device: GPU (``PreprocessSpec.from_config``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence

import numpy as np
import torch
from torch.nn import functional

from ferry_client.protocol import model_config_pb2 as mc

from ..gpu.setup_lock import CUDA_SETUP_LOCK
from .preprocess import Placement, PreprocessSpec

_PRE = mc.FerryPreprocess
#: FerryPreprocess.Interpolation -> (interpolate mode, antialias), following Pillow's filters
_MODES: dict[int, tuple[str, bool]] = {
    _PRE.BILINEAR: ("bilinear", True),
    _PRE.BICUBIC: ("bicubic", True),
    _PRE.NEAREST: ("nearest-exact", False),
}
_TORCH_DTYPES = {"FP32": torch.float32, "FP16": torch.float16, "UINT8": torch.uint8}


class DevicePreprocessor:
    """Resizes and normalises a batch of decoded images on one torch device."""

    def __init__(self, spec: PreprocessSpec, device: str | torch.device) -> None:
        if spec.interpolation not in _MODES:
            name = _PRE.Interpolation.Name(spec.interpolation)
            raise ValueError(f"interpolation {name} is not available on a torch device")
        if spec.engine != _PRE.PILLOW or spec.pad_then_resize or spec.resize_alignment != _PRE.PIXEL_CENTERS:
            raise ValueError(
                "the torch device path reproduces resize_engine: PILLOW with resize-then-pad and pixel-centre "
                "alignment only"
            )
        self.spec = spec
        self.device = torch.device(device)
        self._mode, self._antialias = _MODES[spec.interpolation]
        std = torch.tensor(spec.std, dtype=torch.float32)
        self._pad = float(round(spec.pad_value)) if spec.datatype == "UINT8" else spec.pad_value
        with CUDA_SETUP_LOCK:
            self._gain = (spec.scale / std).view(-1, 1, 1).to(self.device)
            self._bias = (-torch.tensor(spec.mean, dtype=torch.float32) / std).view(-1, 1, 1).to(self.device)
            if self.device.type == "cuda":
                torch.cuda.synchronize(self.device)  # gain and bias were copied on the default stream

    def __call__(self, images: Sequence[np.ndarray], placements: Sequence[Placement]) -> np.ndarray:
        """``images``: (H, W, C) uint8 pixels in the spec's colour mode (RGB or L); one placement each."""
        cuda = self.device.type == "cuda"
        stream = torch.cuda.Stream(self.device) if cuda else None
        with torch.inference_mode(), torch.cuda.stream(stream) if cuda else contextlib.nullcontext():
            batch = self._assemble(images, placements)
            out = self._normalise(batch)
            host = torch.empty(out.shape, dtype=out.dtype, pin_memory=cuda)
            host.copy_(out, non_blocking=cuda)
            if stream is not None:
                stream.synchronize()
        return host.numpy()

    def _assemble(self, images: Sequence[np.ndarray], placements: Sequence[Placement]) -> torch.Tensor:
        """Resized pixels (0..255, float) of every image in an NCHW batch; the rest is the pad value."""
        spec = self.spec
        batch = torch.full(
            (len(images), spec.channels, spec.height, spec.width), self._pad, dtype=torch.float32, device=self.device
        )
        for index, (pixels, where) in enumerate(zip(images, placements, strict=True)):
            pixels = pixels if pixels.flags.writeable and pixels.flags.c_contiguous else np.array(pixels)
            image = torch.from_numpy(pixels).to(self.device, non_blocking=True)
            image = image.permute(2, 0, 1).unsqueeze(0).float()
            width, height = where.resized
            if image.shape[-2:] != (height, width):
                corners = {"align_corners": False} if self._mode != "nearest-exact" else {}
                image = functional.interpolate(
                    image, size=(height, width), mode=self._mode, antialias=self._antialias, **corners
                )
                image = image.round_().clamp_(0.0, 255.0)  # Pillow resizes in 8 bits
            rows, cols = where.rows, where.cols
            region = image[0, :, where.crop_top : where.crop_top + rows, where.crop_left : where.crop_left + cols]
            batch[index, :, where.top : where.top + rows, where.left : where.left + cols] = region
        return batch

    def _normalise(self, batch: torch.Tensor) -> torch.Tensor:
        spec = self.spec
        if spec.color_order == _PRE.BGR:
            batch = batch.flip(1)
        if spec.datatype != "UINT8":
            batch = batch * self._gain + self._bias
        if not spec.channels_first:
            batch = batch.permute(0, 2, 3, 1)
        return batch.to(_TORCH_DTYPES[spec.datatype]).contiguous()
